import pytest
import ini

SAMPLE = """
; top comment
name = demo
[ db ]
Host = localhost
port=5432
url = postgres://u:p@h/db?x=1
# another comment

[empty]
[db]
PORT = 6543
greeting = " hello "
"""


def test_sample():
    assert ini.parse(SAMPLE) == {
        "": {"name": "demo"},
        "db": {"host": "localhost", "port": "6543", "url": "postgres://u:p@h/db?x=1",
               "greeting": " hello "},
        "empty": {},
    }


def test_no_default_section_when_empty():
    assert ini.parse("[a]\nx=1\n") == {"a": {"x": "1"}}
    assert ini.parse("") == {}


@pytest.mark.parametrize("text, line", [
    ("[a]\nno equals here\n", 2),
    ("x=1\n\n = 3\n", 3),
    ("[broken\n", 1),
])
def test_errors(text, line):
    with pytest.raises(ini.ParseError) as e:
        ini.parse(text)
    assert e.value.line == line
    assert isinstance(e.value, ValueError)


def test_no_configparser():
    import inspect
    assert "configparser" not in inspect.getsource(ini)
