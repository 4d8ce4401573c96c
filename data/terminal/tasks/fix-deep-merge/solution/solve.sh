#!/bin/bash
cat > /app/settings.py <<'EOF'
"""Layered configuration."""

import copy


def deep_merge(base, override):
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(result.get(key), dict) and isinstance(value, dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def load(*layers):
    result = {}
    for layer in layers:
        result = deep_merge(result, layer)
    return result
EOF
