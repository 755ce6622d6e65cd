from .hooks import *  # noqa: F401,F403
from .model_wrappers import *  # noqa: F401,F403
from .optimizers import *  # noqa: F401,F403
from .runner import HPMFlexibleRunner, HPMRunner  # noqa: F401
