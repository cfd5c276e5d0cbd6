"""Problems found in a configuration, and the one exception that carries them all."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Location:
    """Where a problem is written: a file as the user named it and a 1-based line."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Problem:
    """One finding: stable kebab-case `code` (see codes.py), the arithmetic in `message`, a
    concrete `fix`, the flags involved, and where it is written when that is known."""

    code: str
    message: str
    fix: str
    flags: tuple[str, ...] = ()
    severity: str = "error"  # "error" or "warning"
    location: Location | None = None

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
