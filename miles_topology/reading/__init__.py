"""Reading inputs into a `Topology`: the path gate, the project's settings, the user's stack
and flag surface, the flag grammar, YAML and flag sources, folder discovery. The Python
launcher sandbox (pylaunch/) and the bash reader (shell/) are built on it, in that order.
This file stays empty: the sandbox's child loads modules of this folder by path."""
