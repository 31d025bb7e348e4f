/* calibrate.h - `dtmc calibrate`: this machine's hardware profile. */
#ifndef DTM_CALIBRATE_H
#define DTM_CALIBRATE_H

extern const char calibrate_help[];
/* Returns the exit status. */
int calibrate_main(int argc, char **argv);

#endif
