// One thread pool, chosen on purpose: which BLAS serves GEMM, the thread
// counts that follow from it, rank pinning, and the warning a wrong BLAS gets.
#include <filesystem>
#include <string>
#include <thread>

#include <ATen/Parallel.h>

#include "ft/train/runtime.h"
#include "ft_run.h"

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("the BLAS detected is the library that serves sgemm_") {
  const auto blas = ft::detect_blas();
  INFO("library " << blas.library << ", " << blas.describe());
  REQUIRE_FALSE(blas.library.empty());  // Debian's LibTorch maps the libblas.so.3 alternative
  const std::string real = std::filesystem::canonical(blas.library).string();
  if (real.find("openblas-openmp") != std::string::npos) CHECK(blas.kind == ft::BlasKind::OpenBlasOpenMP);
  if (real.find("openblas-pthread") != std::string::npos) CHECK(blas.kind == ft::BlasKind::OpenBlasPthread);
  if (real.find("/blas/") != std::string::npos) CHECK(blas.kind == ft::BlasKind::Reference);
  if (blas.kind == ft::BlasKind::OpenBlasOpenMP || blas.kind == ft::BlasKind::OpenBlasPthread) {
    CHECK(blas.config.find("OpenBLAS") != std::string::npos);
  }
}

TEST_CASE("thread plan: one pool for the OpenMP build, no pinning for one rank") {
  const auto plan = ft::configure_threads({3, 0, 1, true});
  CHECK(plan.cpus.empty());  // a single rank is never pinned
  if (plan.blas.kind == ft::BlasKind::OpenBlasOpenMP) {
    CHECK(plan.torch_threads == 3);
    CHECK(plan.blas_threads == 3);
    CHECK_FALSE(plan.warning);
  }
  if (plan.blas.kind == ft::BlasKind::OpenBlasPthread) {
    CHECK(plan.torch_threads == 1);  // the threads go to BLAS, LibTorch's pool stays at one
    CHECK(plan.blas_threads == 3);
    REQUIRE(plan.warning);
    CHECK(plan.warning->find("libopenblas0-openmp") != std::string::npos);
  }
  CHECK(at::get_num_threads() == plan.torch_threads);
  CHECK(plan.describe().find("BLAS") != std::string::npos);
  ft::configure_threads({});
}

TEST_CASE("ranks sharing a host are pinned to their own CPUs; --no-pin turns it off") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const std::string run = "run --config configs/parity-tiny.yaml --strategy ddp --nproc 2 --max-steps 1 --set train.batch_size=16";
  auto pinned = ft_test::run_ft(run);
  INFO(pinned.output);
  REQUIRE(pinned.exit_code == 0);
  CHECK(pinned.output.find("BLAS ") != std::string::npos);
  if (std::thread::hardware_concurrency() >= 2) {
    CHECK(pinned.output.find("local ranks pinned (CPU") != std::string::npos);
  } else {
    CHECK(pinned.output.find("not pinned (2 ranks share 1 CPUs)") != std::string::npos);
  }
  auto free_run = ft_test::run_ft(run + " --no-pin");
  INFO(free_run.output);
  REQUIRE(free_run.exit_code == 0);
  CHECK(free_run.output.find("pinned") == std::string::npos);
}

TEST_CASE("a slow BLAS gets one warning line naming the package to install") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  // Debian's reference BLAS is always installed beside OpenBLAS (libblas3);
  // putting its directory first makes it serve sgemm_ in that process.
  const std::string reference_dir = "/usr/lib/x86_64-linux-gnu/blas";
  if (!std::filesystem::exists(reference_dir + "/libblas.so.3")) {
    ft_test::skip("needs Debian's reference BLAS (" + reference_dir + ", package libblas3)");
    return;
  }
  auto out = ft_test::run_ft("run --config configs/parity-tiny.yaml --max-steps 1", "LD_LIBRARY_PATH=" + reference_dir);
  INFO(out.output);
  REQUIRE(out.exit_code == 0);
  // A LibTorch that carries its own sgemm (the PyPI wheel's, scripts/build-torch2.sh) never asks
  // libblas.so.3: the start line names libtorch_cpu, and there is no BLAS to swap.
  if (out.output.find("libtorch_cpu.so\n") != std::string::npos) {
    ft_test::skip("this LibTorch serves sgemm from libtorch_cpu itself: no system BLAS to swap in");
    return;
  }
  // One line for the BLAS (the run also warns that it saves no checkpoint).
  CHECK(count(out.output, "ft: warning: fp32 matmul uses the reference BLAS") == 1);
  CHECK(out.output.find("reference BLAS") != std::string::npos);
  CHECK(out.output.find("install libopenblas0-openmp") != std::string::npos);
}
