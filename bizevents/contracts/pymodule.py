"""A Python module of contracts written from their Avro schemas, for a consuming team.

A team that reads a business topic needs the event's class, not the producer's plugin
package: :func:`contracts_module` writes the ``BusinessEvent`` classes (and the records
and enums they hold) whose schemas are the given ones, field for field. The module is
checked before it is returned: each class it defines gives back its schema exactly, so
the consumer kit decodes the topic's records into it.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bizevents.contracts.business import TOPIC_PROPERTY, BusinessEvent, _diff, default_topic
from bizevents.contracts.exceptions import ContractError

#: The bizevents types a generated module names instead of dataclasses-avroschema's.
_FACE_TYPES = {
    "types.DateTimeMicro": "Timestamp",
    "types.Int32": "Int32",
    "types.Float32": "Float32",
    "types.condecimal(": "condecimal(",
}
_CLASS = re.compile(r"^class (\w+)\((.*?)\):\n", re.MULTILINE)


@dataclass(frozen=True)
class PulledSchema:
    """A contract's schema as the registry holds it, and where it came from."""

    subject: str
    schema: dict[str, Any]
    topic: str | None  # the subject's topic, when its name says it (<topic>-value)


def contracts_module(pulled: Sequence[PulledSchema], header: str) -> str:
    """The source of a module defining one ``BusinessEvent`` class per schema; ``header``
    opens its docstring. A schema the module cannot give back raises a ContractError."""
    from dataclasses_avroschema import ModelGenerator, ModelType

    blocks: dict[str, str] = {}
    events: dict[str, PulledSchema] = {}
    for item in pulled:
        schema = {k: v for k, v in item.schema.items() if k != TOPIC_PROPERTY}
        fields = schema.get("fields", [])
        if schema.get("type") != "record" or not fields or not _is_lineage(fields[0]):
            raise ContractError(
                f"subject {item.subject} holds no business event (an Avro record whose first "
                "field is bizevents' lineage): nothing to pull"
            )
        try:
            source = ModelGenerator().render(
                schema={**schema, "fields": fields[1:]}, model_type=ModelType.AVRODANTIC.value
            )
        except Exception as exc:  # the generator's and fastavro's many kinds
            raise ContractError(
                f"subject {item.subject}: its schema does not read: {exc}"
            ) from None
        events[str(schema["name"])] = item
        for match, body in _blocks(source):
            name = match.group(1)
            if blocks.setdefault(name, body) != body:
                raise ContractError(
                    f"two subjects define {name} differently (the second is {item.subject}): "
                    "pull them into two modules"
                )
    text = "\n\n".join(
        _event_block(body, events[name]) if name in events else body
        for name, body in blocks.items()
    )
    text = text.replace("(AvroBaseModel):", "(Record):")  # the records events hold
    text = re.sub(r"\n[ \t]*\n[ \t]*\n(    class Meta)", r"\n\n\1", text)
    for theirs, ours in _FACE_TYPES.items():
        text = text.replace(theirs, ours)
    used = [n for n in ("enum", "typing", "pydantic", "types") if f"{n}." in text]
    imports = [f"import {n}" for n in used if n != "types"]
    if "types" in used:
        imports.append("from dataclasses_avroschema import types")
    face = ["BusinessEvent", "Float32", "Int32", "Record", "Timestamp", "condecimal"]
    imports.append(f"from bizevents import {', '.join(n for n in face if n in text)}")
    module = (
        f'"""{header}\n\nWritten by `bizevents contracts pull`; pull again when a contract '
        'evolves."""\n\n' + "\n".join(imports) + "\n\n\n" + text.strip() + "\n"
    )
    _check(module, pulled)
    return module


def _is_lineage(field: dict[str, Any]) -> bool:
    kind = field.get("type")
    return (
        field.get("name") == "lineage"
        and isinstance(kind, dict)
        and kind.get("name") == "Lineage"
        and kind.get("namespace") == "bizevents"
    )


def _blocks(source: str) -> list[tuple[re.Match[str], str]]:
    """Each top-level class of a generated module, with its text."""
    found = list(_CLASS.finditer(source))
    ends = [m.start() for m in found[1:]] + [len(source)]
    return [(m, source[m.start() : end].strip() + "\n") for m, end in zip(found, ends, strict=True)]


def _event_block(body: str, item: PulledSchema) -> str:
    """A generated model as a contract: its base is BusinessEvent, its Meta names its topic."""
    body = body.replace("(AvroBaseModel):", "(BusinessEvent):", 1)
    # the generator orders fields with defaults last unless told; the lineage comes first
    body = body.replace("field_order = [", "field_order = ['lineage', ", 1)
    fullname = f"{item.schema.get('namespace', '')}.{item.schema['name']}".lstrip(".")
    topic = item.topic or item.schema.get(TOPIC_PROPERTY) or default_topic(fullname)
    return body.replace(
        "    class Meta:\n", f"    class Meta:\n        topic = {json.dumps(topic)}\n", 1
    )


#: What a module written from schemas may call: the field types and pydantic's Field.
_CALLS = {"condecimal", "types.confixed", "types.condecimal", "pydantic.Field"}
#: The other expressions it may hold: values, names, types and their operators.
_VALUES: tuple[type[ast.AST], ...] = (
    *(ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Dict),
    *(ast.Set, ast.BinOp, ast.UnaryOp, ast.Load, ast.operator, ast.unaryop, ast.keyword),
)


def _refuse_code(module: str) -> None:
    """``module`` holds only imports, classes of annotated fields and constants, and the
    calls of :data:`_CALLS`: a schema is outside input, and a value the generator writes
    as it is (a fixed's size) must not become a statement."""
    refused = ContractError(
        "the schemas would write code into the module, not only classes of fields: "
        "nothing was written"
    )
    try:
        tree = ast.parse(module)
    except SyntaxError:
        raise refused from None

    def expression(node: ast.AST) -> bool:
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            return func in _CALLS and all(
                expression(n) for n in [*node.args, *(k.value for k in node.keywords)]
            )
        if isinstance(node, ast.Lambda):  # a default_factory
            return not node.args.args and expression(node.body)
        return isinstance(node, _VALUES) and all(
            expression(child) for child in ast.iter_child_nodes(node)
        )

    def statement(node: ast.stmt, top: bool) -> bool:
        if isinstance(node, ast.Expr):
            return isinstance(node.value, ast.Constant)  # a docstring
        if isinstance(node, ast.Import | ast.ImportFrom):
            return top
        if isinstance(node, ast.ClassDef):
            return (
                not node.decorator_list
                and not node.keywords
                and all(expression(b) for b in node.bases)
                and all(statement(n, False) for n in node.body)
            )
        if isinstance(node, ast.AnnAssign):
            # no text in an annotation: pydantic would evaluate it as a forward reference
            text = any(
                isinstance(n, ast.Constant) and isinstance(n.value, str)
                for n in ast.walk(node.annotation)
            )
            return (
                isinstance(node.target, ast.Name)
                and not text
                and all(expression(n) for n in (node.annotation, node.value) if n is not None)
            )
        if isinstance(node, ast.Assign):
            return all(isinstance(t, ast.Name) for t in node.targets) and expression(node.value)
        return False

    if not all(statement(node, True) for node in tree.body):
        raise refused


def _check(module: str, pulled: Sequence[PulledSchema]) -> None:
    """Each event class of ``module`` gives back its subject's schema."""
    _refuse_code(module)
    namespace: dict[str, Any] = {"__name__": "bizevents_pulled_contracts"}
    try:
        # dont_inherit: not this file's `from __future__ import annotations`
        exec(compile(module, "<contracts pull>", "exec", dont_inherit=True), namespace)
    except Exception as exc:
        raise ContractError(f"the module written for the contracts does not load: {exc}") from exc
    for item in pulled:
        model = namespace.get(str(item.schema["name"]))
        if not (isinstance(model, type) and issubclass(model, BusinessEvent)):
            raise ContractError(
                f"subject {item.subject}: its record's name {item.schema['name']!r} cannot "
                "name a Python class"
            )
        wanted = {k: v for k, v in item.schema.items() if k != TOPIC_PROPERTY}
        problems = _diff(
            json.loads(json.dumps(model.contract_schema())), wanted, model.contract_name()
        )
        if problems:
            raise ContractError(
                f"subject {item.subject}: the class written for it would not read its schema "
                f"back ({problems[0]})"
            )
