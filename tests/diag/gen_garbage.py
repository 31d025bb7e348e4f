#!/usr/bin/env python3
"""Writes garbage.dtm: 4096 fixed pseudo-random bytes (xorshift32, seed 1),
for the diagnostic test that binary input is refused cleanly.  The output is
committed; rerun this only to regenerate the same bytes."""
import os

state = 1
out = bytearray()
for _ in range(4096):
    state ^= (state << 13) & 0xFFFFFFFF
    state ^= state >> 17
    state ^= (state << 5) & 0xFFFFFFFF
    out.append(state & 0xFF)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "garbage.dtm")
with open(path, "wb") as f:
    f.write(out)
