#!/bin/bash
# Verifier: the hidden tests in /tests run against the code in /app. The reward is 1 only when
# pytest exits 0 and its JUnit report shows passed tests and no failure or error; anything else
# (a failing test, a crash, a timeout, a process that exits early) leaves the 0 written first.
# -x: the first failure settles the reward, so a wrong answer costs no more time than a right one.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
export PYTHONDONTWRITEBYTECODE=1
report_dir="$(mktemp -d)"
cd /tests || exit 1
pytest -c /tests/pytest.ini --rootdir=/tests -p no:cacheprovider -q -rfE -x --tb=short \
    --junitxml="$report_dir/report.xml" test_outputs.py
status=$?
if [ "$status" -eq 0 ] && [ -f "$report_dir/report.xml" ] && python3 -I - "$report_dir/report.xml" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
count = lambda key: sum(int(s.get(key, 0)) for s in suites)
passed = count("tests") - count("failures") - count("errors") - count("skipped")
sys.exit(0 if passed > 0 and count("failures") == 0 and count("errors") == 0 else 1)
PYEOF
then
    echo 1 > /logs/verifier/reward.txt
fi
exit 0
