"""Two-level scheduling. The global level decides which groups start, in which domain and where:
`admission` (which batch may start), `mix` (which domain, at which level: weighted DRF and the
`curriculum`), `placement` (which replica; the groups in flight), composed with the task pool in
`global_`. The local level: `local` orders one node's sandbox jobs; `node` is a node's sandbox
service, every sandbox job of that node passing through its local scheduler. The two levels
share only the records of `orders` (`NodePolicy`); neither imports the other."""
