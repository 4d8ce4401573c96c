"""Two-level scheduling. `global_` decides which groups start, in which domain and where (it owns
the task pool); `local` orders one node's sandbox jobs; `node` is a node's sandbox service, every
sandbox job of that node passing through its local scheduler. The two levels share only the
records `global_` hands down (`NodePolicy`); neither imports the other."""
