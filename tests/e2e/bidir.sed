# bidir.sed - the bidirectional copy of models/llama.dtm that e2e.equiv.llama's
# bidir: layouts and cuda.kcheck.llama.*_bidir run: attention without the
# causal mask, so every query sees every key (and, on a sequence cp does not
# divide, would see the padding if the ring's block ops did not leave it out).
s/causal = true)/causal = false)/
