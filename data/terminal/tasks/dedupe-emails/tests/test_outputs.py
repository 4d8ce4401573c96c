import re
from pathlib import Path

VALID = re.compile(r"^[a-z0-9._-]+@[a-z0-9-]+(\.[a-z0-9-]+)+$")


def expected():
    found = set()
    for line in (Path(__file__).parent / "data" / "contacts.txt").read_text().splitlines():
        email = line.split(";", 1)[1].strip().lower()
        if VALID.match(email):
            found.add(email)
    return "".join(e + "\n" for e in sorted(found, key=str.encode))


def test_emails():
    out = Path("/app/emails.txt")
    assert out.is_file(), "/app/emails.txt was not written"
    assert out.read_text() == expected()
