from .backbones import *  # noqa: F401,F403
from .data_preprocessor import ChannelCheckedDataPreprocessor  # noqa: F401
from .heads import *  # noqa: F401,F403
from .losses import *  # noqa: F401,F403
from .necks import *  # noqa: F401,F403
from .selfsup import *  # noqa: F401,F403
from .mask_generators import *  # noqa: F401,F403
from .teachers import *  # noqa: F401,F403
