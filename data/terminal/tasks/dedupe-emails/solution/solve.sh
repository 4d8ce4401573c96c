#!/bin/bash
cd /app
cut -d';' -f2- contacts.txt | sed 's/^ *//; s/ *$//' | tr 'A-Z' 'a-z' \
    | grep -E '^[a-z0-9._-]+@[a-z0-9-]+(\.[a-z0-9-]+)+$' | LC_ALL=C sort -u > emails.txt
