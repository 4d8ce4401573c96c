"""The engine's CPU kernels: C sources built on first use by `native`, and their ctypes wrappers.

`paged_decode` (decode attention read straight from the paged pool), `sparse_decode` (block-sparse
decode rows' plan), `sampler` (the untruncated float32 draw), and `int8_weights` (int8 linear
layers, through PyTorch's own int8 matmul: no C of ours). Whether the engine uses each is its `AttentionPlan`'s choice (engine/plan.py), made once;
these modules only say whether they fit a pool and whether their kernel is built here.
"""
