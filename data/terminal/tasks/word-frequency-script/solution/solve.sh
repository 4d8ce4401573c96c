#!/bin/bash
cat > /app/wordfreq.sh <<'EOF'
#!/bin/bash
# Usage: wordfreq.sh FILE N -- the N most frequent words of FILE.
if [ $# -lt 2 ] || [ ! -f "$1" ]; then
    echo "usage: wordfreq.sh FILE N (FILE must exist)" >&2
    exit 1
fi
tr -cs 'A-Za-z' '\n' < "$1" | tr 'A-Z' 'a-z' | grep -v '^$' | LC_ALL=C sort | uniq -c \
    | awk '{ print $2, $1 }' | LC_ALL=C sort -k2,2nr -k1,1 | head -n "$2"
exit 0
EOF
