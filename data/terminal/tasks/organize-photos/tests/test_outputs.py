import datetime
import os
import re
from pathlib import Path

PHOTO = re.compile(r"IMG_(\d{4})(\d{2})(\d{2})_\d{6}\.jpg")


def valid(name):
    m = PHOTO.fullmatch(name)
    if not m:
        return None
    try:
        datetime.date(*map(int, m.groups()))
    except ValueError:
        return None
    return m.group(1), m.group(2)


def manifest():
    rows = (Path(__file__).parent / "data" / "manifest.tsv").read_text().splitlines()
    return dict(r.split("\t", 1) for r in rows)


def test_layout():
    files = manifest()
    expected = {}
    for name, content in files.items():
        ym = valid(name)
        path = f"photos/{ym[0]}/{ym[1]}/{name}" if ym else f"inbox/{name}"
        expected[path] = content + "\n"
    found = {}
    for base in ("photos", "inbox"):
        root = Path("/app") / base
        for dirpath, dirnames, filenames in os.walk(root):
            for f in filenames:
                p = Path(dirpath) / f
                found[str(p.relative_to("/app"))] = p.read_text()
    assert found == expected


def test_no_stray_directories():
    for dirpath, dirnames, filenames in os.walk("/app/photos"):
        rel = Path(dirpath).relative_to("/app/photos").parts
        assert len(rel) <= 2
        if len(rel) < 2:
            assert not filenames, (dirpath, filenames)
