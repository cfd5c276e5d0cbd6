"""Reading inputs into a `Topology`: the path gate, the user's stack and flag surface, the
flag grammar, YAML and flag sources, folder discovery and the kernel confinement of reading.
The bash reader (shell/) and the Python launcher sandbox (pylaunch/) sit beside it, in the
same layer. This file stays empty: the sandbox's child loads modules of this folder by path."""
