"""The transformers.Trainer that the fixture scripts (hf-fixtures.py,
hf-family-fixtures.py) record their reference trajectories with. Imports torch
and transformers, which hf_fixture_common.py must not."""
import json
import math
import tempfile

import torch
from torch.utils.data import Dataset, SequentialSampler
from transformers import Trainer, TrainingArguments

# The tiny models' 8-step run (hf-family-fixtures.py, hf-task-fixtures.py, hf-token-fixtures.py).
TINY_HP = dict(optim="adamw_torch", learning_rate=3e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999,
               adam_epsilon=1e-8, lr_scheduler_type="linear", warmup_steps=2, max_steps=8, max_grad_norm=1.0,
               per_device_train_batch_size=16, gradient_accumulation_steps=1, seed=0)


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


def tiny_trainer_losses(model, data, what):
    """TINY_HP's 8 steps of `model` on `data` (input_ids, attention_mask,
    labels: [N] or per token [N, L]) in file order, on the CPU in fp32, with
    the default collator (the rows come padded): the exact losses."""
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(output_dir=tmp, report_to=[], use_cpu=True, save_strategy="no", logging_steps=1,
                                 disable_tqdm=True, dataloader_num_workers=0, remove_unused_columns=False, **TINY_HP)
        trainer = FixedOrderTrainer(model=model, args=args,
                                    train_dataset=Rows(data, ("input_ids", "attention_mask", "labels")))
        trainer.train()
    losses = trainer.exact_losses
    if len(losses) != 8 or not all(math.isfinite(v) for v in losses):
        raise SystemExit(f"{what}: expected 8 finite losses, got {losses}")
    return losses


def write_ref_losses(path, what, losses, versions, **extra):
    """ref_losses.json of a TINY_HP run: what it ran, `extra` (the label rule, ...), the settings, the losses."""
    ref = {"what": what, **extra,
           "hyperparameters": {**TINY_HP, "precision": "fp32", "device": "cpu", "dropout": 0.0,
                               "sampler": "SequentialSampler", "seq_len": "longest, at most 64"},
           "losses": losses, "versions": versions}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=2)
        f.write("\n")
