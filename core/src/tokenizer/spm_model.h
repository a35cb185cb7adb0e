// Internal: a SentencePiece model file (spm.model, sentencepiece.bpe.model)
// read into plain values, so that only spm_model.cpp sees the protobuf types
// generated from sentencepiece_model.proto.
#pragma once

#include <string>
#include <vector>

namespace ft::hf {

struct SpmPiece {
  // SentencePiece's piece types (ModelProto.SentencePiece.Type).
  enum Type { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  std::string piece;
  // The file stores a float; widened exactly, as Python's protobuf gives it to transformers.
  double score = 0;
  int type = kNormal;
};

struct SpmModel {
  std::vector<SpmPiece> pieces;
  int unk_id = 0;
  // SentencePiece's compiled normalization rule (empty for "identity").
  std::string precompiled_charsmap;
};

// Throws ft::Error naming `path` when it cannot be read or is not a model file.
SpmModel read_spm_model(const std::string& path);

}  // namespace ft::hf
