from typing import List, Optional, Union

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmpretrain.models.selfsup import BaseSelfSupervisor
from mmpretrain.registry import MODELS

from hpm_mm.errors import HPMError
from ..mask_generators import IMAGE_SCORES


def _blocks(module: nn.Module) -> List[nn.Module]:
    """The repeated blocks (an ``nn.ModuleList``'s) that hold no such list."""
    lists = [m for m in module.modules() if isinstance(m, nn.ModuleList)]
    return [b for m in lists for b in m if not set(b.modules()) & set(lists)]


class HPMBase(BaseSelfSupervisor):
    """What every hard-patch-mining algorithm shares: the mask generator, the
    EMA teacher, the schedule, the loss-predictor slot and the mask log.
    :class:`HPM`, :class:`HPMSimMIM`, :class:`HPMBEiT` and :class:`HPMiBOT`
    write their own ``loss`` in the paper's order: :meth:`teach`,
    :meth:`choose_mask`, the student, the head, :meth:`with_mask_log`. The
    teacher averages :meth:`student` (the encoder and the module that
    predicts the scores) and is built only when the mask reads its scores or
    its features are a target; :class:`HPMScheduleHook` pushes the progress
    (:meth:`set_progress`). docs/extending.md says more.

    Args:
        backbone (dict): the encoder: :class:`HPMViT` (HPM) or
            :class:`MaskTokenViT` (SimMIM, BEiT, iBOT).
        neck (dict, optional): the decoder (HPM's holds the loss predictor).
            Defaults to None.
        head (dict, optional): the head that gives the per-patch losses and
            ``loss_rec`` / ``loss_pred``. Defaults to None.
        mask_generator (dict): the mask. Defaults to HPMMaskGenerator (the
            paper's).
        teacher (dict): the EMA teacher, built only when the mask reads its
            scores or its features are a target. Defaults to EMATeacher.
        target_generator (dict, optional): the target in place of the pixels
            (features, paper Tab. 1; BEiT's tokenizer). Defaults to None.
        predictor (dict, optional): an :class:`HPMLossPredictor` on the
            encoder output (the mask-token encoders). Defaults to None.
        pretrained (str, optional): mmpretrain's. Defaults to None.
        data_preprocessor (dict, optional): the batch's normalisation.
            Defaults to None.
        init_cfg (dict | list, optional): the initialisation. Defaults to
            None.
    """

    #: The teacher's features the algorithm trains on, whatever the mask:
    #: False, True (its tokens), or the name of an averaged part the
    #: algorithm applies to them (iBOT's ``'neck'``). The EMA feature target
    #: sets True.
    teacher_target: Union[bool, str] = False
    #: The attribute that holds the loss predictor (:attr:`score_module`).
    score_attr = 'predictor'
    #: Checkpoint key prefixes of earlier hpm_mm layouts -> today's, applied
    #: in order (:meth:`upgrade_state_dict`): the teacher's copy of the score
    #: module was ``teacher.module.predictor`` before issue #72 (for HPM one
    #: name for two things, its score module being its decoder).
    state_dict_renames = (('teacher.module.predictor.',
                           'teacher.module.scorer.'), )

    def __init__(self,
                 backbone: dict,
                 neck: Optional[dict] = None,
                 head: Optional[dict] = None,
                 mask_generator: dict = dict(type='HPMMaskGenerator'),
                 teacher: dict = dict(type='EMATeacher'),
                 target_generator: Optional[dict] = None,
                 predictor: Optional[dict] = None,
                 pretrained: Optional[str] = None,
                 data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[Union[List[dict], dict]] = None) -> None:
        super().__init__(backbone, neck, head, target_generator, pretrained,
                         data_preprocessor, init_cfg)
        self.predictor = MODELS.build(predictor) if predictor else None
        gen = self.mask_generator = MODELS.build(mask_generator)
        N = self.backbone.num_patches
        gen.check(N)
        if gen.varies and self.backbone.drops_masked:
            raise ValueError(
                f'mask_ratio={gen.mask_ratio!r} varies per image but the '
                'encoder drops the masked patches. Fix: a float mask_ratio.')
        if getattr(self.neck, 'num_patches', N) != N:
            raise ValueError(f'neck.num_patches={self.neck.num_patches}, the '
                             f'backbone has {N}. Fix: neck.num_patches={N}.')
        # a predicting loss or a predicted-loss mask needs a predictor
        if not self.with_predictor:
            if getattr(self.head, 'loss_pred', None) is not None:
                raise ValueError('head.loss_pred is set but the model has no '
                                 'loss predictor. Fix: head.loss_pred=None.')
            if gen.uses_scores and gen.score_source == 'predicted_loss':
                raise ValueError('no loss predictor for a mask that masks by '
                                 'predicted loss. Fix: alpha_0=alpha_T=0.')
        self.teacher_features = bool(
            self.teacher_target
            or getattr(self.target_generator, 'uses_teacher', False))
        #: the teacher's keys -> the attributes :meth:`student` reads
        self.student_parts = dict(backbone='backbone')
        if isinstance(self.teacher_target, str):
            self.student_parts[self.teacher_target] = self.teacher_target
        if self.with_predictor:
            self.student_parts['scorer'] = self.score_attr
        teacher_scores = gen.uses_scores and gen.score_source != IMAGE_SCORES
        self.teacher = MODELS.build(
            teacher,
            default_args=dict(
                model=self.student(),
                score_source=gen.score_source if teacher_scores else None,
                features=self.teacher_features)
        ) if teacher_scores or self.teacher_features else None
        self.progress = 0.
        self.optim_steps = self.applied = None
        # warned once without a schedule, where the schedule moves anything
        self._progress_set = not (self.teacher is not None or gen.uses_scores)
        self._mask_checked = False

    @classmethod
    def upgrade_state_dict(cls, state_dict: dict, prefix: str = '') -> dict:
        """A state dict of an earlier hpm_mm in today's keys: each key
        renamed by :attr:`state_dict_renames` in order (today's keys pass
        unchanged). The one key map: every load goes through it
        (:meth:`_load_from_state_dict`, and
        :mod:`hpm_mm.engine.checkpoint_migrations`)."""
        out = {}
        for key, value in state_dict.items():
            for old, new in cls.state_dict_renames:
                if key.startswith(prefix + old):
                    key = prefix + new + key[len(prefix + old):]
            out[key] = value
        return out

    def _load_from_state_dict(self, state_dict, prefix, *args,
                              **kwargs) -> None:
        """Every load (its own and its children's keys, which the loader
        takes from this dict after this call) reads today's keys."""
        upgraded = self.upgrade_state_dict(state_dict, prefix)
        state_dict.clear()
        state_dict.update(upgraded)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def score_module(self) -> Optional[nn.Module]:
        """The student's module with ``predict_scores`` (its loss predictor),
        or None."""
        return self.predictor

    @property
    def with_predictor(self) -> bool:
        """Whether the student has a loss predictor."""
        return self.score_module is not None

    def student(self) -> nn.ModuleDict:
        """What the EMA teacher averages, keyed as in the teacher
        (:attr:`student_parts`): the encoder, the part its targets pass
        through (:attr:`teacher_target` as a name: iBOT's projection head)
        and the loss predictor (``scorer``)."""
        return nn.ModuleDict({
            k: getattr(self, a)
            for k, a in self.student_parts.items()
        })

    def set_progress(self,
                     progress: float,
                     epoch: float = 0,
                     optim_steps: Optional[int] = None,
                     max_epochs: Optional[float] = None,
                     applied=None) -> None:
        """Set t/T (mask schedule), the epochs done (teacher momentum), the
        optimizer steps taken and whether the last was ``applied`` (teacher
        update, :meth:`EMATeacher.update`) and the run's length in epochs.
        """
        self.progress = float(progress)
        self.optim_steps = optim_steps
        self.applied = applied
        self._progress_set = True
        if self.teacher is not None:
            self.teacher.set_epoch(epoch, max_epochs)

    def compile_parts(self, **options) -> List[str]:
        """``torch.compile`` the step's pure tensor work, module- and
        method-wise (weights and state-dict keys untouched): the student's
        encoder and neck, the head's losses, the teacher's encoder and
        predictor. Block by block where a part repeats blocks (an
        ``nn.ModuleList``): one block's code compiles once for all its
        copies, in less than half the whole part's time (docs/speed.md).
        The teacher update, the mask and the optimizer step stay eager
        (host-side state a graph would recompile for). Returns the parts
        compiled."""
        parts = dict(backbone=self.backbone, neck=self.neck)
        if self.teacher is not None:
            parts['teacher.backbone'] = self.teacher.module['backbone']
        done = []
        for name, module in parts.items():
            if isinstance(module, nn.Module):
                for m in module.modules():  # mmpretrain's np.linspace rates:
                    if hasattr(m, 'drop_prob'):  # a float, not a traced
                        m.drop_prob = float(m.drop_prob)  # array's branch
                for block in _blocks(module) or [module]:
                    block.compile(**options)
                done.append(name)
        # methods the step calls by name: compiled in place (an instance
        # attribute over the method; the module and its weights unchanged)
        methods = [('head.loss', self.head, 'loss')]
        if self.teacher is not None and 'scorer' in self.teacher.module:
            methods.append(('teacher.scorer.predict_scores',
                            self.teacher.module['scorer'], 'predict_scores'))
        for name, owner, method in methods:
            if owner is not None and hasattr(owner, method):
                setattr(owner, method,
                        torch.compile(getattr(owner, method), **options))
                done.append(name)
        return done

    def extract_feat(self, inputs: torch.Tensor):
        """Unmasked features of the student encoder (``out_type`` tuple);
        of the first view when given several."""
        if isinstance(inputs, (list, tuple)):
            inputs = inputs[0]
        return self.backbone(inputs, mask=None)

    def teach(self, inputs: torch.Tensor) -> tuple:
        """Before the student: the teacher follows it, then gives the scores
        the mask reads now (or the generator's own image scores) and its
        tokens when a target, in one pass: ``(scores, features)``, each None
        when not needed. Says once that nothing set the progress, where it
        moves anything."""
        if not self._progress_set:
            self._progress_set = True
            print_log(
                'set_progress was never called: the schedules stay at their '
                'start. Fix: dict(type="HPMScheduleHook") in custom_hooks.',
                'current', 30)
        needs = self.mask_generator.needs_scores(self.backbone.num_patches,
                                                 self.progress)
        scores = features = None
        if self.teacher is not None:
            self.teacher.update(self.student(), self.optim_steps, self.applied)
            scores, features = self.teacher(
                inputs, scores=needs, features=self.teacher_features)
        if needs and scores is None:  # score_source='image'
            scores = self.mask_scores(inputs)
        return scores, features

    @torch.no_grad()
    def mask_scores(self,
                    inputs: torch.Tensor,
                    use_teacher: bool = True) -> torch.Tensor:
        """The (B, N) scores the mask generator reads: its own
        :meth:`~BaseMaskGenerator.image_scores`, or the teacher's pass
        (``use_teacher=False``: the student's loss predictor on the full
        image, for the pictures)."""
        gen = self.mask_generator
        if gen.score_source == IMAGE_SCORES:
            return gen.image_scores(inputs,
                                    tuple(self.backbone.patch_resolution))
        if use_teacher and self.teacher is not None:
            return self.teacher(inputs).scores
        return self.student_scores(inputs)

    @torch.no_grad()
    def student_scores(self, inputs: torch.Tensor) -> torch.Tensor:
        """The student's loss predictor on the full image, (B, N) fp32."""
        if self.score_module is None:
            raise ValueError(f'{type(self).__name__} has no loss predictor.')
        B, N = inputs.shape[0], self.backbone.num_patches
        latent, ids = self.backbone(inputs, inputs.new_zeros(B, N), N)
        return self.score_module.predict_scores(latent, ids).float()

    def choose_mask(self, scores: Optional[torch.Tensor],
                    inputs: torch.Tensor) -> torch.Tensor:
        """(B, N) mask, 1 = masked, from the mask generator. The model's
        first one is checked against the generator's contract (one read
        back to the host, once), refused in one line naming the generator:
        one that masks a patch too few would train an epoch silently."""
        B, N, gen = inputs.shape[0], self.backbone.num_patches, \
            self.mask_generator
        mask = gen(scores, self.progress, N, B, inputs.device)
        if self._mask_checked:
            return mask
        self._mask_checked = True
        rows = mask.detach().float().sum(-1).flatten().cpu()
        high = gen.max_masked(N)
        low = 0 if gen.varies else high
        binary = ((mask == 0) | (mask == 1)).all()
        if not (tuple(mask.shape) == (B, N) and binary
                and low <= rows.min() <= rows.max() <= high):
            raise HPMError(
                f'{type(gen).__name__} masked {rows.int().unique().tolist()} '
                f'patches per image where mask_ratio={gen.mask_ratio!r} '
                f'asks for {f"0..{high}" if gen.varies else high} in a 0/1 '
                f'({B}, {N}) mask (got shape {tuple(mask.shape)}). Fix: '
                'python tools/misc/check_mask_generator.py MODULE:CLASS.')
        return mask

    def with_mask_log(self, losses: dict, inputs: torch.Tensor) -> dict:
        """Add the mask generator's log scalars (alpha, num_hard): host
        numbers, kept as CPU tensors (made on the GPU, each would be a copy
        that makes the host wait)."""
        for key, value in self.mask_generator.log_vars(
                self.backbone.num_patches, self.progress).items():
            losses[key] = torch.tensor(float(value))
        return losses
