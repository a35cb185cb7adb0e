// Activation checkpointing: run a piece of the network (an encoder layer)
// without keeping its activations, and recompute it during backward.
//
// Memory: a layer's forward keeps O(10) tensors of [batch, seq, hidden] and
// two of [batch, heads, seq, seq] for backward; checkpointed, it keeps only
// its input. Cost: the layer's forward runs twice (about +1/3 step time).
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ft {

/// How a piece of the network is being run, for wrappers that manage its
/// weights (a ZeRO-3/FSDP unit runner gathers and frees them around it).
enum class RunPass {
  kPlain,      ///< an ordinary call, training or evaluation as grad mode says
  kNoGraph,    ///< checkpointed forward: no graph kept; kRecompute follows in backward
  kRecompute,  ///< in backward: the backward of this very output follows at once
};

/// The function checkpoint() runs: told which pass it is in.
using CheckpointFn = std::function<at::Tensor(const at::Tensor& input, RunPass pass)>;

/// Computes fn(input) without recording a graph, keeping only `input`, the
/// CPU random generator's state (and the input's CUDA generator's, on CUDA)
/// and the autocast state. When backward reaches the result, fn runs again
/// on `input` with those states restored (so dropout draws the same masks)
/// and grad enabled, and that graph is back-propagated at once.
///
/// `params`: every leaf fn reads that may need a gradient (a layer's
/// parameters; those not requiring grad are skipped). Their gradients come
/// out of this function's backward, so autograd accumulates them into
/// `.grad` through the parameters' own AccumulateGrad nodes and their
/// post-hooks (DDP buckets, ZeRO reduce-scatter) fire exactly as without
/// checkpointing. A parameter fn uses but that is not listed gets NO
/// gradient.
///
/// fn is called twice (kNoGraph, then kRecompute), so wrappers inside it
/// run twice as well: a ZeRO-3 UnitRunner gathers the freed weights again
/// for the recompute and keeps them for the backward that follows. fn must
/// give the same result for the same input, RNG state and weights; the
/// weights must not change between forward and backward.
///
/// Without grad mode (evaluation), or when neither `input` nor any of
/// `params` requires grad, this is plain fn(input, kPlain).
///
/// Random streams: if another thread draws from the CPU generator between
/// this forward and its recompute (several dp replicas on CPU threads), the
/// masks would differ; callers must not checkpoint then while dropout is on.
at::Tensor checkpoint(const at::Tensor& input, const std::vector<at::Tensor>& params, CheckpointFn fn);

}  // namespace ft
