"""Problems found in a configuration, and the one exception that carries them all."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Problem:
    """One finding: stable kebab-case `code`, the arithmetic in `message`, a concrete `fix`."""

    code: str
    message: str
    fix: str
    flags: tuple[str, ...] = ()
    severity: str = "error"  # "error" or "warning"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["flags"] = list(self.flags)
        del d["severity"]
        return d

    def __str__(self) -> str:
        return f"[{self.code}] {self.message} Fix: {self.fix}"

    def lines(self, kind: str | None = None) -> list[str]:
        """The text report of one problem, as `check`, the launcher and the plan print it."""
        out = [f"{kind or self.severity} [{self.code}] {self.message}", f"  fix: {self.fix}"]
        if self.flags:
            out.append(f"  flags: {', '.join(self.flags)}")
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
