"""Binary searches in ascending sorted lists."""


def find_first(items, target):
    lo, hi = 0, len(items) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1


def find_last(items, target):
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] <= target:
            lo = mid + 1
        else:
            hi = mid
    if lo and items[lo - 1] == target:
        return lo - 1
    return -1


def count(items, target):
    first = find_first(items, target)
    if first < 0:
        return 0
    return find_last(items, target) - first + 1
