// What the LibTorch ft was built against can do, for the layers that must
// refuse a setting before anything runs (config validation refuses
// `model.attention: sdpa` on a LibTorch without it).
#pragma once

namespace ft {

/// LibTorch has at::scaled_dot_product_attention (2.0 and newer; not 1.13).
bool sdpa_available();

}  // namespace ft
