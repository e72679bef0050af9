from enum import IntEnum

from deepjit import validation as C


class ScoringFunc(IntEnum):
    SIGMOID = 0
    SQRTSOFTPLUS = 1
    SOFTMAX = 2
    IDENTITY = 3

    def __str__(self) -> str:
        return self.name.lower()

    @staticmethod
    def from_str(label: str) -> "ScoringFunc":
        try:
            return ScoringFunc[label.upper()]
        except KeyError:
            raise C.fail("scoring_func", f"one of {[str(s) for s in ScoringFunc]}", repr(label)) from None
