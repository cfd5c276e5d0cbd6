"""Hypothesis strategy shared by the fuzz tests: real script text, mutated line by line."""

from hypothesis import strategies as st


def mutated(texts: list[str], snippets: list[str], min_edits: int, max_edits: int):
    """Scripts made from `texts` by deleting, duplicating, swapping, truncating lines and
    inserting `snippets` mid-line."""

    @st.composite
    def build(draw) -> str:
        lines = draw(st.sampled_from(texts)).split("\n")
        for _ in range(draw(st.integers(min_edits, max_edits))):
            kind = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "truncate"]))
            n = len(lines)
            if n == 0:
                break
            i = draw(st.integers(0, n - 1))
            if kind == "delete":
                del lines[i]
            elif kind == "duplicate":
                lines.insert(i, lines[i])
            elif kind == "swap":
                j = draw(st.integers(0, n - 1))
                lines[i], lines[j] = lines[j], lines[i]
            elif kind == "insert":
                at = draw(st.integers(0, len(lines[i])))
                lines[i] = lines[i][:at] + draw(st.sampled_from(snippets)) + lines[i][at:]
            else:
                text = "\n".join(lines)
                lines = text[: draw(st.integers(0, len(text)))].split("\n")
        return "\n".join(lines)

    return build()
