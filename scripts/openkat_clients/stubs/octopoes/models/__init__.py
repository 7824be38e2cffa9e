"""Stand-in for octopoes.models: a reference is its string."""


class Reference(str):
    __slots__ = ()

    @classmethod
    def from_str(cls, value: str) -> "Reference":
        return cls(value)
