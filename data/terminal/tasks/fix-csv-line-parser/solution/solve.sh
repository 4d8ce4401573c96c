#!/bin/bash
cat > /app/csvline.py <<'EOF'
"""One line of CSV."""


def split_line(line):
    fields, field, i, n = [], [], 0, len(line)
    quoted = False
    while i < n:
        c = line[i]
        if quoted:
            if c == '"':
                if i + 1 < n and line[i + 1] == '"':
                    field.append('"')
                    i += 1
                else:
                    quoted = False
            else:
                field.append(c)
        elif c == ",":
            fields.append("".join(field))
            field = []
        elif c == '"':
            quoted = True
        else:
            field.append(c)
        i += 1
    if quoted:
        raise ValueError("unterminated quoted field")
    fields.append("".join(field))
    return fields


def join_line(fields):
    out = []
    for f in fields:
        if any(c in f for c in ',"') or f != f.strip():
            f = '"' + f.replace('"', '""') + '"'
        out.append(f)
    return ",".join(out)
EOF
