#!/bin/bash
cd /app
deleted_in=$(git rev-list -n 1 main -- config/settings.ini)
git checkout "${deleted_in}~1" -- config/settings.ini
git commit -q -m "Restore config/settings.ini" -- config/settings.ini
