import re
import subprocess
from collections import Counter


def expected(text, n):
    c = Counter(w.lower() for w in re.findall(r"[A-Za-z]+", text))
    return "".join(f"{w} {k}\n" for w, k in sorted(c.items(), key=lambda x: (-x[1], x[0]))[:n])


def run(*args):
    return subprocess.run(["bash", "/app/wordfreq.sh", *args], capture_output=True, text=True,
                          timeout=20)


TEXTS = [
    "The cat and the hat.\nThe CAT sat; the end!\nAnd then: the cat's hat?\n",
    "one two two three three three\nfour-four_four 4four\n",
    "Zebra apple zebra Apple mango, MANGO; kiwi\n" * 3,
    "",
]


def test_outputs(tmp_path):
    for i, text in enumerate(TEXTS):
        f = tmp_path / f"in{i}.txt"
        f.write_text(text)
        for n in (1, 3, 10):
            r = run(str(f), str(n))
            assert r.returncode == 0, r.stderr
            assert r.stdout == expected(text, n), (text, n)


def test_errors(tmp_path):
    r = run(str(tmp_path / "missing.txt"), "3")
    assert r.returncode == 1 and r.stderr.strip()
    r = run()
    assert r.returncode == 1 and r.stderr.strip()
