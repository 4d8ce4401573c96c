#!/bin/bash
# Builds the repository of the task (run once, offline, at set-up).
set -e
cd /app
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME="Robin Dev" GIT_AUTHOR_EMAIL="robin@example.com"
export GIT_COMMITTER_NAME="Robin Dev" GIT_COMMITTER_EMAIL="robin@example.com"
git init -q .
git symbolic-ref HEAD refs/heads/main
commit() {
    export GIT_AUTHOR_DATE="2024-03-$(printf %02d "$1")T09:00:00+0000"
    export GIT_COMMITTER_DATE="$GIT_AUTHOR_DATE"
    git add pricing.py check.py notes.txt .gitignore README.md
    git commit -q -m "$2"
}
cp .setup/check.py check.py
printf '__pycache__/\n' > .gitignore
for i in $(seq 1 16); do
    python3 .setup/render.py "$i" > pricing.py
    echo "step $i" >> notes.txt
    commit "$i" "$(sed -n "${i}p" .setup/messages.txt)"
done
