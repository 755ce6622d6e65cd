from .feature_targets import (CLIPFeatureTarget, EMATeacherTarget,
                              ViTFeatureTarget)

__all__ = ['EMATeacherTarget', 'ViTFeatureTarget', 'CLIPFeatureTarget']
