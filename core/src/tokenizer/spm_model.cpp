#include "spm_model.h"

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "sentencepiece_model.pb.h"

namespace ft::hf {

SpmModel read_spm_model(const std::string& path) {
  const std::string bytes = fs::read_file(path);
  sentencepiece::ModelProto proto;
  if (!proto.ParseFromString(bytes) || proto.pieces_size() == 0) {
    fail("{}: not a SentencePiece model (no pieces could be read); it should be the .model file SentencePiece "
         "trained",
         path);
  }
  SpmModel m;
  m.pieces.reserve(static_cast<std::size_t>(proto.pieces_size()));
  for (const auto& p : proto.pieces()) m.pieces.push_back({p.piece(), static_cast<double>(p.score()), p.type()});
  m.unk_id = proto.trainer_spec().unk_id();
  m.precompiled_charsmap = proto.normalizer_spec().precompiled_charsmap();
  return m;
}

}  // namespace ft::hf
