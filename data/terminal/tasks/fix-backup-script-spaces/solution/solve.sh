#!/bin/bash
cat > /app/backup.sh <<'EOF'
#!/bin/bash
# Usage: backup.sh SRC DEST
src=$1
dest=$2
mkdir -p -- "$dest"
count=0
manifest=$(mktemp)
for path in "$src"/*.txt; do
    [ -f "$path" ] || continue
    name=$(basename -- "$path")
    cp -- "$path" "$dest/$name"
    printf '%s\t%s\n' "$name" "$(stat -c %s -- "$path")" >> "$manifest"
    count=$((count + 1))
done
LC_ALL=C sort "$manifest" > "$dest/MANIFEST"
rm -f "$manifest"
echo "copied $count files"
EOF
