#!/bin/bash
# Builds the repository of the task (run once, offline, at set-up).
set -e
cd /app
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME="Sam Ops" GIT_AUTHOR_EMAIL="sam@example.com"
export GIT_COMMITTER_NAME="Sam Ops" GIT_COMMITTER_EMAIL="sam@example.com"
git init -q .
git symbolic-ref HEAD refs/heads/main
commit() {
    export GIT_AUTHOR_DATE="2024-04-$(printf %02d "$1")T10:00:00+0000"
    export GIT_COMMITTER_DATE="$GIT_AUTHOR_DATE"
    git add -A -- . ':!.setup' ':!NOTES.md'
    git commit -q -m "$2"
}
mkdir -p config src
cp .setup/app.py src/app.py
printf '# Service\n' > README.md
cp .setup/settings_v1.ini config/settings.ini
commit 1 "Initial service"
cp .setup/settings_v2.ini config/settings.ini
commit 2 "Tune settings"
printf 'level = info\n' > config/logging.ini
commit 3 "Add logging config"
cp .setup/settings_v3.ini config/settings.ini
commit 4 "Raise worker count"
git rm -q config/settings.ini
printf 'level = debug\n' > config/logging.ini
commit 5 "Clean up config"
printf '# Service\n\nRun src/app.py.\n' > README.md
commit 6 "Document usage"
