#!/bin/bash
cat > /app/ini.py <<'EOF'
"""A small INI-file parser."""


class ParseError(ValueError):
    def __init__(self, line, message):
        super().__init__(f"line {line}: {message}")
        self.line = line


def parse(text):
    result = {}
    section = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ParseError(number, "unterminated section header")
            section = line[1:-1].strip()
            result.setdefault(section, {})
            continue
        key, eq, value = line.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or not key:
            raise ParseError(number, "expected key = value")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        result.setdefault(section, {})[key] = value
    return result
EOF
