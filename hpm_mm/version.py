__version__ = '0.1.0'
#: e.g. (0, 1, 0); a part that is not a number stays a string ('0rc1')
version_info = tuple(
    int(x) if x.isdigit() else x for x in __version__.split('.'))
