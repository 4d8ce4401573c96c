#!/bin/bash
# Usage: backup.sh SRC DEST
src=$1
dest=$2
mkdir -p $dest
count=0
: > $dest/MANIFEST
for f in $(ls $src | grep '\.txt$'); do
    cp $src/$f $dest/
    echo -e "$f\t$(stat -c %s $src/$f)" >> $dest/MANIFEST
    count=$((count + 1))
done
sort -o $dest/MANIFEST $dest/MANIFEST
echo "copied $count files"
