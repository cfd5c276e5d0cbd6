"""The one finding type (a problem at a location), and the one exception that carries them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..codes import CODES, SKIPPED


@dataclass(frozen=True)
class Location:
    """Where something is written: a file as the user named it, a 1-based line (what a
    problem points at, and where the script reader read a word; values given by `--env`
    are at `<env>`:0) and, when its reader knows it, the 1-based column of the word (not
    part of equality: one line, one place)."""

    path: str
    line: int
    column: int | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Problem:
    """One finding: stable kebab-case `code` (see codes/), the arithmetic in `message`, a
    concrete `fix`, the flags involved, and where it is written when that is known.

    `severity` is the code's, declared once in the registry (error, warning or note), or
    `skipped` when the rule that reports it could not decide; any other value is refused,
    so no format can show a code at another severity than `rule CODE` does.
    """

    code: str
    message: str
    fix: str
    flags: tuple[str, ...] = ()
    severity: str = ""  # the code's (from the registry), or "skipped"
    location: Location | None = None

    def __post_init__(self) -> None:
        declared = CODES[self.code].severity if self.code in CODES else "error"
        if not self.severity:
            object.__setattr__(self, "severity", declared)
        elif self.severity not in (declared, SKIPPED):
            raise ValueError(f"problem code {self.code} is declared {declared}, not "
                             f"{self.severity} (a report is its code's severity, or skipped)")

    def as_dict(self) -> dict:
        d = {"code": self.code, "message": self.message, "fix": self.fix,
             "flags": list(self.flags)}
        if self.location is not None:
            d["location"] = {"path": self.location.path, "line": self.location.line}
        return d

    def at(self, location: Location | None) -> Problem:
        return replace(self, location=location)

    def __str__(self) -> str:
        return f"[{self.code}] {self.message} Fix: {self.fix}"

    def lines(self, kind: str | None = None) -> list[str]:
        """The text report of one problem, as `check`, the launcher and the plan print it."""
        out = [f"{kind or self.severity} [{self.code}] {self.message}", f"  fix: {self.fix}"]
        if self.flags:
            out.append(f"  flags: {', '.join(self.flags)}")
        if self.location is not None:
            out.append(f"  at: {self.location}")
        return out


@dataclass
class TopologyError(ValueError):
    """Every error found at once; `summary` holds world_size/dp/edp when the grid still forms."""

    problems: list[Problem]
    warnings: list[Problem] = field(default_factory=list)
    summary: dict | None = None

    def __post_init__(self) -> None:
        super().__init__(str(self))

    @property
    def codes(self) -> list[str]:
        return [p.code for p in self.problems]

    def __str__(self) -> str:
        n = len(self.problems)
        lines = [f"invalid topology: {n} problem{'s' if n != 1 else ''}"]
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines)


class InputError(Exception):
    """Input that cannot be read at all (missing file, bad YAML): exit code 2, not 1."""


class NoTrainingLaunch(InputError):
    """The input starts no training job (a converter, a server, a wrapper, a model file):
    nothing to check or migrate. Callers that treat this case apart catch it by type."""
