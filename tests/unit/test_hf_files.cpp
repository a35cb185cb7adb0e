// Checkpoints carry HF's tokenizer files (tokenizer_config.json,
// special_tokens_map.json) beside vocab.txt, read back the way transformers
// reads them (tests/python/check_tokenizer_files.py with Debian's python3);
// `ft export` copies them; `ft predict` takes model_max_length from them.
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "ft/checkpoint/checkpoint.h"  // before doctest: LibTorch's c10 logging defines its own CHECK

#include <doctest/doctest.h>
#include "ft_run.h"
#include "ft_test.h"
#include "ft_tiny_task.h"

namespace fsys = std::filesystem;

TEST_CASE("a checkpoint's tokenizer files read as transformers reads them; export keeps them") {
  ft_test::TempDir tmp("hf-files");
  ft_test::write_tiny_task(tmp.path());
  const auto out = tmp.path() / "out";
  auto run = ft_test::run_ft(fmt::format("run --config {}/run.yaml --max-steps 1 --set data.max_seq_len=24 "
                                         "--output-dir {}",
                                         tmp.path().string(), out.string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const auto ckpt = out / "final";
  CHECK(ft::read_model_max_length(ckpt) == 24);
  CHECK(ft::read_model_max_length(tmp.path()) == std::nullopt);  // no file: an older checkpoint

  const auto exported = tmp.path() / "exported";
  auto exp = ft_test::run_ft(fmt::format("export {} {}", ckpt.string(), exported.string()));
  INFO(exp.output);
  REQUIRE(exp.exit_code == 0);

  if (!fsys::exists("/usr/bin/python3")) {
    ft_test::skip("/usr/bin/python3 is not installed; the files were not read as transformers does");
    return;
  }
  for (const auto& dir : {ckpt, exported}) {
    CAPTURE(dir.string());
    const std::string cmd = fmt::format("/usr/bin/python3 {}/tests/python/check_tokenizer_files.py {} 24 1 > {} 2>&1",
                                        FT_SOURCE_DIR, dir.string(), (tmp.path() / "py.txt").string());
    const int rc = std::system(cmd.c_str());
    INFO(ft_test::read_text(tmp.path() / "py.txt"));
    CHECK(rc == 0);
  }
}

TEST_CASE("tokenizer_config.json: BertTokenizer, the case rule and the length as given") {
  const std::string cased = ft::tokenizer_config_json(false, 512);
  CHECK(cased.find("\"do_lower_case\": false") != std::string::npos);
  CHECK(cased.find("\"model_max_length\": 512") != std::string::npos);
  CHECK(cased.find("\"tokenizer_class\": \"BertTokenizer\"") != std::string::npos);
  CHECK(ft::special_tokens_map_json().find("\"mask_token\": \"[MASK]\"") != std::string::npos);
}
