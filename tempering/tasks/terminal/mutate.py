"""AST-located, text-level mutations of Python source: the bugs of the generated bug-fix tasks.

`find_mutations(source)` walks the module's AST and proposes one-line edits at exact token
positions (the rest of the file stays byte for byte the same, so the oracle's fix is a one-line
patch): comparison operator swaps, arithmetic and boolean operator swaps, off-by-one integer
constants, flipped booleans, dropped negations, swapped call arguments, a wrong return value,
`break`/`continue` swaps and swapped builtins or string methods (min/max, any/all,
startswith/endswith, ...). `apply(source, mutation)` returns the mutated source. Whether a
mutation is kept (it must break at least one test) is the generator's business
(scripts/generate_mutation_tasks.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass

COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
           ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
COMPARE_SWAPS = {"<": ["<=", ">"], "<=": ["<", ">="], ">": [">=", "<"], ">=": [">", "<="],
                 "==": ["!="], "!=": ["=="], "is": ["is not"], "is not": ["is"],
                 "in": ["not in"], "not in": ["in"]}
BINOP = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
         ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.Pow: "**"}
BINOP_SWAPS = {"+": ["-"], "-": ["+"], "*": ["//"], "/": ["*"], "//": ["/", "*"], "%": ["//"],
               "<<": [">>"], ">>": ["<<"], "&": ["|"], "|": ["&"], "**": ["*"]}
BOOLOP = {ast.And: "and", ast.Or: "or"}
NAME_SWAPS = {"min": "max", "max": "min", "any": "all", "all": "any"}
METHOD_SWAPS = {"startswith": "endswith", "endswith": "startswith", "lstrip": "rstrip",
                "rstrip": "lstrip", "upper": "lower", "lower": "upper", "find": "rfind",
                "rfind": "find", "index": "rindex", "rindex": "index", "keys": "values",
                "values": "keys", "appendleft": "append", "popleft": "pop", "extend": "append",
                "isdigit": "isalpha", "isalpha": "isdigit", "isupper": "islower", "islower": "isupper"}


@dataclass(frozen=True)
class Mutation:
    """One edit: on 1-based `line`, the bytes [col, end_col) (UTF-8 offsets, as the AST gives
    them) holding `original` become `mutated`. `function` is the qualified name of the enclosing
    function or class ('' at module level); `operator` names the kind of mutation."""

    line: int
    col: int
    end_col: int
    original: str
    mutated: str
    operator: str
    function: str
    description: str

    def as_dict(self) -> dict:
        return asdict(self)


def apply(source: str, m: Mutation) -> str:
    """The source with `m` applied; raises ValueError if the text at its place is not `original`."""
    lines = source.splitlines(keepends=True)
    raw = lines[m.line - 1].encode("utf-8")
    if raw[m.col:m.end_col].decode("utf-8") != m.original:
        raise ValueError(f"line {m.line}: expected {m.original!r} at {m.col}:{m.end_col}, "
                         f"found {raw[m.col:m.end_col]!r}")
    lines[m.line - 1] = (raw[:m.col] + m.mutated.encode("utf-8") + raw[m.end_col:]).decode("utf-8")
    return "".join(lines)


def _norm(s: str) -> str:
    return " ".join(s.split())


class _Finder(ast.NodeVisitor):
    def __init__(self, source: str):
        self.lines = [ln.encode("utf-8") for ln in source.splitlines(keepends=True)]
        self.scope: list[str] = []
        self.found: list[Mutation] = []
        self.skip_depth = 0  # inside f-strings, annotations and docstrings nothing is mutated

    # -- helpers -------------------------------------------------------------------------
    def _text(self, line: int, col: int, end: int) -> str:
        return self.lines[line - 1][col:end].decode("utf-8")

    def _add(self, line, col, end, mutated, operator, description):
        original = self._text(line, col, end)
        if original == mutated:
            return
        self.found.append(Mutation(line, col, end, original, mutated, operator,
                                   ".".join(self.scope), description))

    def _gap_token(self, left: ast.AST, right: ast.AST, spelling: str):
        """(line, col, end) of `spelling` in the text between two nodes on one line, when that
        text holds nothing else but whitespace and parentheses."""
        if left.end_lineno != right.lineno or left.end_lineno is None:
            return None
        line = left.end_lineno
        gap = self._text(line, left.end_col_offset, right.col_offset)
        core = gap.strip(" \t()")
        if _norm(core) != spelling:
            return None
        start = left.end_col_offset + len(gap[: gap.index(core)].encode("utf-8"))
        return line, start, start + len(core.encode("utf-8"))

    @staticmethod
    def _one_line(node: ast.AST) -> bool:
        return getattr(node, "lineno", None) is not None and node.lineno == node.end_lineno

    # -- scopes and skipped regions ----------------------------------------------------------
    def _visit_scope(self, node):
        self.scope.append(node.name)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
        for deco in getattr(node, "decorator_list", []):
            self.visit(deco)
        if isinstance(node, ast.ClassDef):
            for b in node.bases:
                self.visit(b)
        else:
            self.visit(node.args)  # defaults are code; annotations are skipped in visit_arg
        for stmt in body:
            self.visit(stmt)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _visit_scope

    def visit_arg(self, node):
        return  # annotations

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)

    def visit_JoinedStr(self, node):
        return

    def visit_If(self, node):
        test = node.test
        # `if __name__ == "__main__":` blocks and `if TYPE_CHECKING:` are not library behaviour
        if (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__") \
                or (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") \
                or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
            return
        self.generic_visit(node)

    def visit_Assign(self, node):
        names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        if names & {"__all__", "__version__", "__author__", "__license__", "version_info"}:
            return
        self.generic_visit(node)

    def visit_Try(self, node):
        # the fallback branches of `except ImportError:` are not what the tests exercise
        for stmt in node.body + node.orelse + node.finalbody:
            self.visit(stmt)
        for h in node.handlers:
            names = []
            if isinstance(h.type, ast.Name):
                names = [h.type.id]
            elif isinstance(h.type, ast.Tuple):
                names = [e.id for e in h.type.elts if isinstance(e, ast.Name)]
            if not {"ImportError", "ModuleNotFoundError"} & set(names):
                self.visit(h)

    visit_TryStar = visit_Try

    # -- operators -------------------------------------------------------------------------
    def visit_Compare(self, node):
        prev = node.left
        for op, right in zip(node.ops, node.comparators):
            spelling = COMPARE[type(op)]
            pos = self._gap_token(prev, right, spelling)
            if pos:
                for new in COMPARE_SWAPS[spelling]:
                    self._add(*pos, new, "compare", f"`{spelling}` became `{new}`")
            prev = right
        self.generic_visit(node)

    def visit_BinOp(self, node):
        spelling = BINOP.get(type(node.op))
        if spelling:
            pos = self._gap_token(node.left, node.right, spelling)
            # `"%s" % x` is string formatting, not arithmetic
            is_format = spelling == "%" and isinstance(node.left, (ast.Constant, ast.JoinedStr)) \
                and isinstance(getattr(node.left, "value", None), str)
            if pos and not is_format:
                for new in BINOP_SWAPS[spelling]:
                    self._add(*pos, new, "arithmetic", f"`{spelling}` became `{new}`")
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        spelling = BINOP.get(type(node.op))
        if spelling in ("+", "-"):
            pos = self._gap_token(node.target, node.value, spelling + "=")
            if pos:
                new = {"+": "-", "-": "+"}[spelling] + "="
                self._add(*pos, new, "arithmetic", f"`{spelling}=` became `{new}`")
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        spelling = BOOLOP[type(node.op)]
        if len(node.values) == 2:
            pos = self._gap_token(node.values[0], node.values[1], spelling)
            if pos:
                new = "or" if spelling == "and" else "and"
                self._add(*pos, new, "boolean", f"`{spelling}` became `{new}`")
        self.generic_visit(node)

    def visit_UnaryOp(self, node):
        if isinstance(node.op, ast.Not) and self._one_line(node) and node.lineno == node.operand.lineno:
            head = self._text(node.lineno, node.col_offset, node.operand.col_offset)
            m = re.match(r"not\s+", head)
            if m:
                end = node.col_offset + len(m.group(0).encode("utf-8"))
                self._add(node.lineno, node.col_offset, end, "", "negation", "a `not` was dropped")
        self.generic_visit(node)

    def visit_Constant(self, node):
        if not self._one_line(node):
            return
        v = node.value
        if isinstance(v, bool):
            self._add(node.lineno, node.col_offset, node.end_col_offset, str(not v), "constant",
                      f"`{v}` became `{not v}`")
        elif isinstance(v, int) and 0 <= v <= 4096:
            text = self._text(node.lineno, node.col_offset, node.end_col_offset)
            if text.isdigit():  # plain decimal literals only (no 0x.., 1_000)
                for new in (v + 1, v - 1):
                    if new >= 0:
                        self._add(node.lineno, node.col_offset, node.end_col_offset, str(new),
                                  "off-by-one", f"`{v}` became `{new}`")

    def visit_Return(self, node):
        value = node.value
        if value is not None and self._one_line(value) and not (
                isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, bool))) \
                and isinstance(value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.BinOp)):
            self._add(value.lineno, value.col_offset, value.end_col_offset, "None", "return",
                      "a return value became `None`")
        self.generic_visit(node)

    def visit_Break(self, node):
        self._add(node.lineno, node.col_offset, node.end_col_offset, "continue", "control", "`break` became `continue`")

    def visit_Continue(self, node):
        self._add(node.lineno, node.col_offset, node.end_col_offset, "break", "control", "`continue` became `break`")

    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Name) and f.id in NAME_SWAPS and self._one_line(f):
            self._add(f.lineno, f.col_offset, f.end_col_offset, NAME_SWAPS[f.id], "builtin",
                      f"`{f.id}` became `{NAME_SWAPS[f.id]}`")
        elif isinstance(f, ast.Attribute) and f.attr in METHOD_SWAPS and self._one_line(f):
            raw = self.lines[f.end_lineno - 1]
            end = f.end_col_offset
            start = end - len(f.attr.encode("utf-8"))
            if raw[start:end].decode("utf-8") == f.attr:
                self._add(f.lineno, start, end, METHOD_SWAPS[f.attr], "method",
                          f"`.{f.attr}` became `.{METHOD_SWAPS[f.attr]}`")
        args = node.args
        if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]) \
                and all(self._one_line(a) for a in args[:2]) and args[0].lineno == args[1].lineno:
            a, b = args[0], args[1]
            ta = self._text(a.lineno, a.col_offset, a.end_col_offset)
            tb = self._text(b.lineno, b.col_offset, b.end_col_offset)
            between = self._text(a.lineno, a.end_col_offset, b.col_offset)
            if ta != tb and _norm(between) == ",":
                self._add(a.lineno, a.col_offset, b.end_col_offset, tb + between + ta, "arguments",
                          "two arguments of a call were swapped")
        self.generic_visit(node)


def find_mutations(source: str, validate: bool = True) -> list[Mutation]:
    """Every mutation this module proposes for `source`, in source order. With `validate`, each
    mutant is parsed and kept only if it is valid Python with a different AST (one parse of the
    whole file per mutation: the generator skips it, since running the tests rejects both)."""
    tree = ast.parse(source)
    finder = _Finder(source)
    finder.visit(tree)
    if not validate:
        return list(finder.found)
    out = []
    for m in finder.found:
        try:
            mutated = apply(source, m)
            if ast.dump(ast.parse(mutated)) != ast.dump(tree):
                out.append(m)
        except (SyntaxError, ValueError):
            continue
    return out
