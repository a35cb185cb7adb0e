"""The transformers.Trainer that the fixture scripts (hf-fixtures.py,
hf-family-fixtures.py) record their reference trajectories with. Imports torch
and transformers, which hf_fixture_common.py must not."""
import torch
from torch.utils.data import Dataset, SequentialSampler
from transformers import Trainer


class Rows(Dataset):
    """Row i of a dict of equally long tensors, as a dict of the named keys."""

    def __init__(self, tensors, keys):
        self.t = tensors
        self.keys = keys

    def __len__(self):
        return self.t["input_ids"].shape[0]

    def __getitem__(self, i):
        return {k: self.t[k][i] for k in self.keys}


class FixedOrderTrainer(Trainer):
    """Rows in file order (global step s = rows [B s, B s + B)); per step it
    keeps the exact loss, the learning rate its update uses and the gradient
    norm before clipping. Reading them changes nothing in the run."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.exact_losses = []
        self.step_lrs = []
        self.grad_norms = []

    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        result = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        loss = result[0] if return_outputs else result
        if model.training:
            self.exact_losses.append(loss.detach().item())
            # The LR this step's optimizer.step() will use (the scheduler steps after it).
            self.step_lrs.append(self.optimizer.param_groups[0]["lr"])
        return result

    def training_step(self, model, inputs, *args, **kwargs):
        out = super().training_step(model, inputs, *args, **kwargs)
        # Gradient accumulation is 1 in every fixture: the grads now are this step's, before clipping.
        grads = [p.grad.detach().double().norm() for p in model.parameters() if p.grad is not None]
        self.grad_norms.append(torch.stack(grads).norm().item())
        return out
