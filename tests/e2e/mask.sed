# mask.sed - the masked copy of models/llama.dtm that e2e.equiv.llama's
# mask: layouts and cuda.kcheck.llama.mask* run: attention with a sliding
# window of 8 and document masks from an i32 input `seg` (segment ids),
# split as the tokens are.
s/causal = true)/causal = true, window = 8, segments = seg)/
s/^\(input targets .*\)$/\1\ninput seg     : i32[batch, ctx] @ [dp, cp]/
