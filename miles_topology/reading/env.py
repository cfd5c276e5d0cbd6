"""`PartialEnv`: an environment known only in part, shared by the script reader and the YAML
loader (sources.py), so neither has to import the other."""

from __future__ import annotations


class PartialEnv(dict):
    """An environment known only in part (a ray job's runtime env the script does not spell
    out): a name not in it is unknown, not unset. `sources.load_fields` leaves out every
    top-level field whose value reads an unknown name and lists it in `dropped`, so that a
    check skips what needs it instead of taking a default."""

    def __init__(self, known=(), why: str = "", defaults: bool = False):
        super().__init__(known)
        self.why = why
        self.defaults = defaults  # a name not in it takes the YAML's default, where written
        self.dropped: list[str] = []


# Why a topology YAML's ${oc.env:NAME} (with no default) is unresolved at check time: `check`
# reads no name from its own environment (in CI that holds the runner's secrets, which the
# report would print), only --env and the YAML's default; `miles-topology flags`, run by the
# launch script itself, does read it.
AT_RUN_TIME = ("the environment it reads is the one at run time: `check` resolves "
               "${oc.env:NAME} only from --env NAME=VALUE (or the default written in it)")
