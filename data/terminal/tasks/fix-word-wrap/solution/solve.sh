#!/bin/bash
sed -i 's/len(current) + len(word) <= width/len(current) + 1 + len(word) <= width/' /app/wrap.py
