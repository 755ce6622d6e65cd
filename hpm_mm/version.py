__version__ = '0.1.0'


def parse_version_info(version_str: str) -> tuple:
    """Parse '0.1.0rc1' into (0, 1, 0, 'rc1')."""
    info = []
    for x in version_str.split('.'):
        if x.isdigit():
            info.append(int(x))
        elif 'rc' in x:
            num, rc = x.split('rc')
            info += [int(num), f'rc{rc}']
    return tuple(info)


version_info = parse_version_info(__version__)
