from .backbones import *  # noqa: F401,F403
from .heads import *  # noqa: F401,F403
from .losses import *  # noqa: F401,F403
from .necks import *  # noqa: F401,F403
from .selfsup import *  # noqa: F401,F403
from .utils import *  # noqa: F401,F403
