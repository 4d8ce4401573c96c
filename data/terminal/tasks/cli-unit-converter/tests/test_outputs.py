import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "/app/convert.py", *args], capture_output=True, text=True,
                          timeout=20)


@pytest.mark.parametrize("args, out", [
    (["5", "km", "mi"], "3.107 mi"),
    (["1", "mi", "m", "--precision", "1"], "1609.3 m"),
    (["12", "in", "ft"], "1.000 ft"),
    (["-3", "yd", "cm", "--precision", "0"], "-274 cm"),
    (["2.5e3", "mm", "m"], "2.500 m"),
    (["1", "m", "in", "--precision", "5"], "39.37008 in"),
])
def test_conversions(args, out):
    r = run(*args)
    assert (r.returncode, r.stdout.strip()) == (0, out), r.stderr


def test_list():
    assert run("--list").stdout.split() == ["mm", "cm", "m", "km", "in", "ft", "yd", "mi"]


def test_errors():
    r = run("1", "parsec", "m")
    assert r.returncode == 2 and "unknown unit parsec" in r.stderr
    r = run("1", "m", "KM")
    assert r.returncode == 2 and "unknown unit KM" in r.stderr
    assert run("abc", "m", "km").returncode == 2
