"""Which columns of a raw table the built-in model trains on, and as what.

Hyperparameters name the label, the numeric and the categorical columns, each by name
(where the files have a header or a schema) or by 0-based position; `I1..I13` and `1..13`
are ranges. Left at auto, the layout is Criteo's: `label, I1..I13, C1..C26`, by those names
where the files carry them, else at positions 0, 1..13 and 14..39. Each numeric column is a
field of its own (its id is its index among the numeric columns, its value the transformed
number); each categorical column's values hash into its own buckets of the ids after them
(trainer.data.raw_features), so `field_size` is the number of numeric and categorical columns.

`ColumnSpec` is what the hyperparameters say; `resolve_columns` places it on a file's header (a
pure function: the same spec and header give the same mapping on every host).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from trainer.errors import JobError

CRITEO_NUMERIC = tuple(f"I{i}" for i in range(1, 14))
CRITEO_CATEGORICAL = tuple(f"C{i}" for i in range(1, 27))
CRITEO_NAMES = ("label",) + CRITEO_NUMERIC + CRITEO_CATEGORICAL
ROLES = ("label", "numeric", "categorical")
HYPERPARAMETER = {"label": "label_column", "numeric": "numeric_columns", "categorical": "categorical_columns"}
TRANSFORMS = {"log1p": "log(1 + max({x}, 0))", "none": "{x} as it is"}
_RANGE = re.compile(r"^(?P<prefix>.*?)(?P<first>\d+)\.\.(?P=prefix)(?P<last>\d+)$")

Ref = "int | str"  # a column by position (int) or by name (str)


def parse_refs(text: str | None, hyperparameter: str) -> tuple | None:
    """The columns a hyperparameter names: None (auto), () ("none"), or positions and names;
    `a..b` ranges expand (`I1..I3` is I1, I2, I3; `1..3` is 1, 2, 3)."""
    if text is None:
        return None
    items = [item.strip() for item in str(text).split(",") if item.strip()]
    if items == ["none"]:
        return ()
    refs: list = []
    for item in items:
        match = _RANGE.match(item)
        if match:
            first, last = int(match["first"]), int(match["last"])
            if last < first:
                raise JobError(f"hyperparameter '{hyperparameter}': range {item!r} runs backwards")
            prefix = match["prefix"]
            refs += [number if not prefix else f"{prefix}{number}" for number in range(first, last + 1)]
        else:
            refs.append(int(item) if item.isdigit() else item)
    return tuple(refs)


@dataclass(frozen=True)
class ColumnSpec:
    """The columns as the hyperparameters give them (None: auto, Criteo's) and the transform
    of the numeric ones."""

    label: tuple | None = None  # one ref
    numeric: tuple | None = None
    categorical: tuple | None = None
    transform: str = "log1p"

    @staticmethod
    def from_hyperparameters(hp) -> "ColumnSpec":
        spec = ColumnSpec(*(parse_refs(getattr(hp, HYPERPARAMETER[role]), HYPERPARAMETER[role]) for role in ROLES),
                          transform=hp.numeric_transform)
        if spec.label is not None and len(spec.label) != 1:
            raise JobError(f"hyperparameter 'label_column': one column, got {hp.label_column!r}")
        if spec.numeric == () and spec.categorical == ():
            raise JobError("hyperparameters 'numeric_columns' and 'categorical_columns' are both none: the model "
                           "needs at least one feature column")
        return spec

    def counts(self) -> tuple[int, int]:
        """(numeric columns, categorical columns): known before any file is read."""
        return (len(CRITEO_NUMERIC) if self.numeric is None else len(self.numeric),
                len(CRITEO_CATEGORICAL) if self.categorical is None else len(self.categorical))

    @property
    def field_size(self) -> int:
        return sum(self.counts())

    def names_needed(self) -> list[str]:
        """The hyperparameters that name columns (which then need a header or a schema)."""
        return [HYPERPARAMETER[role] for role in ROLES
                if any(isinstance(ref, str) for ref in getattr(self, role) or ())]


@dataclass(frozen=True)
class Column:
    name: str
    position: int


@dataclass(frozen=True)
class ColumnMapping:
    """The spec placed on a file: every column's name and position; `width` the columns of a
    row (None: Parquet, which selects by name)."""

    label: Column
    numeric: tuple[Column, ...]
    categorical: tuple[Column, ...]
    transform: str
    width: int | None
    by_name: bool  # resolved through a header or a schema

    @property
    def field_size(self) -> int:
        return len(self.numeric) + len(self.categorical)

    def buckets(self, feature_size: int) -> int:
        """Hash buckets of each categorical column: the ids after the numeric fields'."""
        return feature_size - len(self.numeric)

    @property
    def features(self) -> tuple[Column, ...]:
        return self.numeric + self.categorical

    def by_names(self) -> ColumnSpec:
        """The spec of these very columns, by name: what every other file of the channel is read
        by (auto, once placed on the first file, stays that file's choice)."""
        return ColumnSpec((self.label.name,), tuple(c.name for c in self.numeric),
                          tuple(c.name for c in self.categorical), self.transform)

    def describe(self, feature_size: int) -> list[dict]:
        """Per column: what it becomes (the plan's and the log's table)."""
        rows = [{"column": self.label.name, "position": self.label.position, "as": "label"}]
        rows += [{"column": c.name, "position": c.position, "as": f"numeric field {i}: id {i}, value "
                  f"{TRANSFORMS[self.transform].format(x=c.name)} (missing: 0)"} for i, c in enumerate(self.numeric)]
        first = len(self.numeric)
        rows += [{"column": c.name, "position": c.position, "as": f"categorical field {first + j}: its value hashed "
                  f"into ids [{first}, {feature_size}) (missing: its own id), value 1"}
                 for j, c in enumerate(self.categorical)]
        return rows

    def summary(self, feature_size: int) -> str:
        """The mapping in one line of the log."""
        def span(columns):
            if len(columns) >= 3:
                return f"{columns[0].name}..{columns[-1].name}"
            return ", ".join(c.name for c in columns) or "none"
        return (f"label {self.label.name}; {len(self.numeric)} numeric ({span(self.numeric)}, "
                f"{TRANSFORMS[self.transform].format(x='x')}, missing 0); {len(self.categorical)} categorical "
                f"({span(self.categorical)}, hashed per column into {self.buckets(feature_size)} ids); "
                f"field_size {self.field_size}")


def resolve_columns(spec: ColumnSpec, names: tuple[str, ...] | None, width: int | None, where: str) -> ColumnMapping:
    """Place `spec` on a file whose header or schema is `names` (None: it has none) and whose
    rows have `width` columns (None: unknown before the rows come, as in Pipe mode); `where`
    names the file or stream for errors."""
    if names is None:
        needed = spec.names_needed()
        if needed:
            raise JobError(f"{where}: {', '.join(needed)} name columns, but it has no header: give 0-based "
                           "positions (e.g. label_column=0, numeric_columns=1..13) or add a header line")
    criteo_names = names is not None and set(CRITEO_NAMES) <= set(names)
    defaults = {"label": ("label",) if criteo_names else (0,),
                "numeric": CRITEO_NUMERIC if criteo_names else tuple(range(1, 14)),
                "categorical": CRITEO_CATEGORICAL if criteo_names else tuple(range(14, 40))}
    chosen = {role: getattr(spec, role) if getattr(spec, role) is not None else defaults[role] for role in ROLES}
    criteo_positions = not criteo_names and all(getattr(spec, role) is None for role in ROLES)
    known = width if width is not None else (len(names) if names is not None else None)

    def place(role: str, ref) -> Column:
        if isinstance(ref, str):
            if ref not in names:
                raise JobError(f"{where}: it has no column '{ref}' ({HYPERPARAMETER[role]}); its columns: "
                               f"{', '.join(names)}")
            return Column(ref, names.index(ref))
        if known is not None and ref >= known:
            auto = " (auto: Criteo's layout, label, I1..I13, C1..C26 at 0..39)" if getattr(spec, role) is None else ""
            raise JobError(f"{where}: {HYPERPARAMETER[role]}{auto} asks for column {ref} (0-based), but its rows have "
                           f"{known} columns: set label_column, numeric_columns and categorical_columns")
        name = names[ref] if names is not None else CRITEO_NAMES[ref] if criteo_positions else f"column_{ref}"
        return Column(name, ref)

    placed = {role: tuple(place(role, ref) for ref in chosen[role]) for role in ROLES}
    seen: dict[int, str] = {}
    for role in ROLES:
        for column in placed[role]:
            if column.position in seen:
                raise JobError(f"{where}: column {column.name} is given twice ({seen[column.position]} and "
                               f"{HYPERPARAMETER[role]})")
            seen[column.position] = HYPERPARAMETER[role]
    return ColumnMapping(placed["label"][0], placed["numeric"], placed["categorical"], spec.transform,
                         width if width is not None else (max(seen) + 1 if names is None else None),
                         by_name=names is not None)


def nominal(spec: ColumnSpec) -> ColumnMapping:
    """The mapping of a spec before any file says where its columns are (Pipe-mode Parquet,
    whose every object is placed by its own schema): the columns named as the spec names them
    (auto: Criteo's names), in the order label, numeric, categorical."""
    numeric, categorical = spec.counts()

    def names(role: str, default: tuple) -> tuple:
        refs = getattr(spec, role)
        return default if refs is None else tuple(ref if isinstance(ref, str) else f"column_{ref}" for ref in refs)

    ordered = names("label", ("label",)) + names("numeric", CRITEO_NUMERIC) + names("categorical", CRITEO_CATEGORICAL)
    columns = [Column(name, position) for position, name in enumerate(ordered)]
    return ColumnMapping(columns[0], tuple(columns[1:1 + numeric]), tuple(columns[1 + numeric:]), spec.transform,
                         len(columns), by_name=True)
