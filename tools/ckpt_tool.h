/* ckpt_tool.h - `dtmc ckpt info|merge|split` (tools/ckpt_tool.c). */
#ifndef DTM_TOOLS_CKPT_TOOL_H
#define DTM_TOOLS_CKPT_TOOL_H

/* argv[1] is the subcommand; 0 on success, 1 after an error message. */
int ckpt_main(int argc, char **argv);

#endif
