"""One line of CSV."""


def split_line(line):
    return line.split(",")


def join_line(fields):
    out = []
    for f in fields:
        if any(c in f for c in ',"') or f != f.strip():
            f = '"' + f.replace('"', '""') + '"'
        out.append(f)
    return ",".join(out)
