// Private to the config TUs: the one list of every RunConfig field with its
// YAML section and key. Reading, writing and the known-key list all walk it,
// so a field added here is loaded, saved and suggested everywhere at once.
#pragma once

#include <string>
#include <vector>

#include "ft/config/config.h"

namespace ft::config_detail {

/// Calls f(section, key, field) for every field, in the order to_yaml writes
/// them. Config is RunConfig or const RunConfig.
template <typename Config, typename F>
void for_each_field(Config& c, F&& f) {
  f("model", "config", c.model.config);
  f("model", "weights", c.model.weights);
  f("model", "dropout", c.model.dropout);
  f("model", "padding_free", c.model.padding_free);
  f("model", "attention", c.model.attention);
  f("model", "problem_type", c.model.problem_type);

  f("data", "train", c.data.train);
  f("data", "dev", c.data.dev);
  f("data", "format", c.data.format);
  f("data", "text_field", c.data.text_field);
  f("data", "pair_field", c.data.pair_field);
  f("data", "label_field", c.data.label_field);
  f("data", "tokens_field", c.data.tokens_field);
  f("data", "tags_field", c.data.tags_field);
  f("data", "label_all_tokens", c.data.label_all_tokens);
  f("data", "tag_scheme", c.data.tag_scheme);
  f("data", "columns", c.data.columns);
  f("data", "label_delimiter", c.data.label_delimiter);
  f("data", "label_scale", c.data.label_scale);
  f("data", "labels", c.data.labels);
  f("data", "max_rows", c.data.max_rows);
  f("data", "take", c.data.take);
  f("data", "dev_fraction", c.data.dev_fraction);
  f("data", "split_seed", c.data.split_seed);
  f("data", "shuffle_before_split", c.data.shuffle_before_split);
  f("data", "strip_spaces", c.data.strip_spaces);
  f("data", "bad_rows", c.data.bad_rows);
  f("data", "vocab", c.data.vocab);
  f("data", "lowercase", c.data.lowercase);
  f("data", "max_seq_len", c.data.max_seq_len);
  f("data", "padding", c.data.padding);
  f("data", "pair_truncation", c.data.pair_truncation);
  f("data", "group_by_length", c.data.group_by_length);

  f("train", "epochs", c.train.epochs);
  f("train", "max_steps", c.train.max_steps);
  f("train", "batch_size", c.train.batch_size);
  f("train", "eval_batch_size", c.train.eval_batch_size);
  f("train", "grad_accum", c.train.grad_accum);
  f("train", "optimizer", c.train.optimizer);
  f("train", "lr", c.train.lr);
  f("train", "weight_decay", c.train.weight_decay);
  f("train", "beta1", c.train.beta1);
  f("train", "beta2", c.train.beta2);
  f("train", "eps", c.train.eps);
  f("train", "momentum", c.train.momentum);
  f("train", "decay_bias_and_norm", c.train.decay_bias_and_norm);
  f("train", "scheduler", c.train.scheduler);
  f("train", "warmup_type", c.train.warmup_type);
  f("train", "warmup_ratio", c.train.warmup_ratio);
  f("train", "warmup_steps", c.train.warmup_steps);
  f("train", "max_grad_norm", c.train.max_grad_norm);
  f("train", "seed", c.train.seed);
  f("train", "shuffle", c.train.shuffle);
  f("train", "drop_last", c.train.drop_last);
  f("train", "log_every", c.train.log_every);
  f("train", "eval_every", c.train.eval_every);
  f("train", "save_every", c.train.save_every);
  f("train", "save_each_epoch", c.train.save_each_epoch);
  f("train", "save_total_limit", c.train.save_total_limit);
  f("train", "save_sharded", c.train.save_sharded);
  f("train", "best_metric", c.train.best_metric);
  f("train", "greater_is_better", c.train.greater_is_better);
  f("train", "early_stopping_patience", c.train.early_stopping_patience);
  f("train", "early_stopping_threshold", c.train.early_stopping_threshold);
  f("train", "load_best_model_at_end", c.train.load_best_model_at_end);
  f("train", "class_weights", c.train.class_weights);
  f("train", "label_smoothing_factor", c.train.label_smoothing_factor);
  f("train", "focal_loss_gamma", c.train.focal_loss_gamma);
  f("train", "regression_loss", c.train.regression_loss);
  f("train", "multi_label_threshold", c.train.multi_label_threshold);
  f("train", "output_dir", c.train.output_dir);
  f("train", "resume_from", c.train.resume_from);
  f("train", "freeze", c.train.freeze);
  f("train", "freeze_layers", c.train.freeze_layers);
  f("train", "layer_lr_decay", c.train.layer_lr_decay);
  f("train", "head_lr", c.train.head_lr);
  f("train", "activation_checkpointing", c.train.activation_checkpointing);

  f("lora", "rank", c.lora.rank);
  f("lora", "alpha", c.lora.alpha);
  f("lora", "dropout", c.lora.dropout);
  f("lora", "targets", c.lora.targets);
  f("lora", "train_head", c.lora.train_head);
  f("lora", "adapter", c.lora.adapter);

  f("adapter", "size", c.adapter.size);
  f("adapter", "layers", c.adapter.layers);
  f("adapter", "non_linearity", c.adapter.non_linearity);
  f("adapter", "path", c.adapter.path);

  f("prompt", "length", c.prompt.length);
  f("prompt", "init", c.prompt.init);
  f("prompt", "init_text", c.prompt.init_text);
  f("prompt", "train_head", c.prompt.train_head);
  f("prompt", "path", c.prompt.path);

  f("prefix", "length", c.prefix.length);
  f("prefix", "projection", c.prefix.projection);
  f("prefix", "train_head", c.prefix.train_head);
  f("prefix", "path", c.prefix.path);

  f("pretrain", "mlm_probability", c.pretrain.mlm_probability);
  f("pretrain", "whole_word_masking", c.pretrain.whole_word_masking);
  f("pretrain", "packing", c.pretrain.packing);
  f("pretrain", "max_rows", c.pretrain.max_rows);

  f("embedding", "loss", c.embedding.loss);
  f("embedding", "scale", c.embedding.scale);
  f("embedding", "symmetric", c.embedding.symmetric);
  f("embedding", "gather_across_devices", c.embedding.gather_across_devices);
  f("embedding", "mini_batch_size", c.embedding.mini_batch_size);
  f("embedding", "pooling", c.embedding.pooling);
  f("embedding", "normalize", c.embedding.normalize);

  f("strategy", "name", c.strategy.name);
  f("strategy", "precision", c.strategy.precision);
  f("strategy", "loss_scale", c.strategy.loss_scale);
  f("strategy", "loss_scale_init", c.strategy.loss_scale_init);
  f("strategy", "loss_scale_window", c.strategy.loss_scale_window);
  f("strategy", "loss_scale_hysteresis", c.strategy.loss_scale_hysteresis);
  f("strategy", "loss_scale_min", c.strategy.loss_scale_min);
  f("strategy", "options", c.strategy.options);

  f("runtime", "device", c.runtime.device);
  f("runtime", "threads", c.runtime.threads);
  f("runtime", "pin_threads", c.runtime.pin_threads);
  f("runtime", "timeout_s", c.runtime.timeout_s);
  f("runtime", "save_grace_s", c.runtime.save_grace_s);
  f("runtime", "metrics_out", c.runtime.metrics_out);
  f("runtime", "progress", c.runtime.progress);
  f("runtime", "profile_steps", c.runtime.profile_steps);
  f("runtime", "profile_dir", c.runtime.profile_dir);
  f("runtime", "tensorboard_dir", c.runtime.tensorboard_dir);
  f("runtime", "report_to", c.runtime.report_to);
  f("runtime", "run_name", c.runtime.run_name);
}

/// The section names, in file order.
inline const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = {"model", "data", "train", "lora", "adapter", "prompt", "prefix",
                                                 "pretrain", "embedding", "strategy", "runtime"};
  return names;
}

/// Every "section.key", in file order.
std::vector<std::string> known_keys();

/// The known key closest to `key` by edit distance, or "" when none is close
/// enough to be a plausible typo.
std::string closest_key(const std::string& key);

}  // namespace ft::config_detail
