import csv
import random

import pytest
import csvline


@pytest.mark.parametrize("line, fields", [
    ('a,"b,c",""""', ["a", "b,c", '"']),
    ("", [""]),
    ("a,,b", ["a", "", "b"]),
    ('"",x', ["", "x"]),
    ('"he said ""hi""",2', ['he said "hi"', "2"]),
    ("a,b,", ["a", "b", ""]),
])
def test_examples(line, fields):
    assert csvline.split_line(line) == fields


def test_unterminated():
    with pytest.raises(ValueError):
        csvline.split_line('a,"bc')


def test_round_trip_and_csv_module():
    rng = random.Random(11)
    alphabet = 'ab ,"x'
    for _ in range(1000):
        fields = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))
                  for _ in range(rng.randint(1, 5))]
        line = csvline.join_line(fields)
        assert csvline.split_line(line) == fields
        assert next(csv.reader([line])) == fields or fields == [""]
