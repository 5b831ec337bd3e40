// lm-eval's few-shot draw (probes/fewshot.h) against CPython: every expected list below is what
// CPython 3.11 printed for the same calls (python3 -c "import random; r = random.Random(1234);
// print(r.sample(range(7473), 5))" and so on), not detaudit's output. GSM8K's train split holds
// 7473 questions; the issue that asked for the sampler names document 0's five: 6374, 3610, 957,
// 61, 742.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "probes/fewshot.h"
#include "probes/runner.h"
#include "test_util.h"

using detaudit::probes::fewshot_draws;
using detaudit::probes::py_random;

TEST_CASE("fewshot: Random(1234).sample over GSM8K's train split gives CPython's draws, document by document") {
  py_random r(1234);
  CHECK(r.sample(7473, 5) == std::vector<size_t>{6374, 3610, 957, 61, 742});
  CHECK(r.sample(7473, 5) == std::vector<size_t>{7462, 6610, 4769, 286, 5501});
  py_random six(1234);  // k > 5 widens random.py's set threshold; the draws themselves are the same
  CHECK(six.sample(7473, 6) == std::vector<size_t>{6374, 3610, 957, 61, 742, 7462});
}

TEST_CASE("fewshot: a pool of at most 21 takes sample()'s list branch, as CPython does") {
  py_random r(1234);
  CHECK(r.sample(12, 5) == std::vector<size_t>{7, 1, 0, 10, 9});
  CHECK(r.sample(12, 5) == std::vector<size_t>{10, 1, 11, 5, 3});
}

TEST_CASE("fewshot: a seed of more than 32 bits is seeded from its words, least significant first") {
  py_random r((uint64_t{1} << 40) + 5);
  CHECK(r.sample(100, 3) == std::vector<size_t>{64, 66, 34});
}

TEST_CASE("fewshot: draws go document by document from one generator, and the same split drops the document itself") {
  const auto d = fewshot_draws(7473, 5, 2, false);
  REQUIRE(d.size() == 2);
  CHECK(d[0] == std::vector<size_t>{6374, 3610, 957, 61, 742});
  CHECK(d[1] == std::vector<size_t>{7462, 6610, 4769, 286, 5501});
  // Pool of 12 as the documents themselves: 6 drawn per document ([7, 1, 0, 10, 9, 5] for document
  // 0 by CPython's sample(range(12), 6)); document 0's own index 0 is dropped, the first 5 kept.
  const auto same = fewshot_draws(12, 5, 1, true);
  REQUIRE(same.size() == 1);
  CHECK(same[0] == std::vector<size_t>{7, 1, 10, 9, 5});
  CHECK_THROWS_AS(fewshot_draws(5, 5, 1, true), std::invalid_argument);
}

TEST_CASE("fewshot: --dataset gsm8k with a 7473-line pool gives document 0 train lines 6374, 3610, 957, 61, 742") {
  const std::filesystem::path dir = detaudit::test::process_scratch_dir("fewshot_gsm8k");
  const std::string train = (dir / "train.jsonl").string(), test = (dir / "test.jsonl").string();
  {
    std::ofstream t(train);
    for (int i = 0; i < 7473; ++i) t << "{\"question\": \"train question " << i << "?\", \"answer\": \"#### " << i << "\"}\n";
    std::ofstream q(test);
    q << "{\"question\": \"first?\", \"answer\": \"#### 1\"}\n{\"question\": \"second?\", \"answer\": \"#### 2\"}\n";
  }
  detaudit::probes::dataset_options d;
  d.fewshot_file = train;  // --num-fewshot left out: lm-eval's 5
  const auto items = detaudit::probes::items_load_dataset("gsm8k:" + test, d);
  REQUIRE(items.size() == 2);
  std::string want;
  for (int i : {6374, 3610, 957, 61, 742})
    want += "Question: train question " + std::to_string(i) + "?\nAnswer: #### " + std::to_string(i) + "\n\n";
  CHECK(items[0].prompt == want + "Question: first?\nAnswer:");
  CHECK(items[1].prompt.rfind("Question: train question 7462?\nAnswer: #### 7462\n\n", 0) == 0);
  CHECK(items[0].doc == "{\"question\": \"first?\", \"answer\": \"#### 1\"}");
}

// lm-eval drops every exemplar equal to the document (`x != doc`), so a dataset that holds a
// document twice, used as its own few-shot pool, never shows a document its own answer. Lines: 0
// "A?", 1 "B?", 2 "C?", 3 a second "A?". CPython's Random(1234).sample(range(4), 3) is [3, 0, 2]:
// document 0 drops 3 (its duplicate) and 0 (itself) and keeps [2]: one exemplar of the two asked
// for, as lm-eval's [x for x in fewshotex if x != doc][:2] keeps.
TEST_CASE("fewshot: a document's duplicate in its own few-shot pool is dropped as lm-eval drops it") {
  const std::filesystem::path dir = detaudit::test::process_scratch_dir("fewshot_dup");
  const std::string data = (dir / "dup.jsonl").string();
  {
    std::ofstream f(data);
    f << "{\"question\": \"A?\", \"answer\": \"#### 1\"}\n{\"question\": \"B?\", \"answer\": \"#### 2\"}\n"
         "{\"question\": \"C?\", \"answer\": \"#### 3\"}\n{\"question\": \"A?\", \"answer\": \"#### 1\"}\n";
  }
  detaudit::probes::dataset_options d;
  d.fewshot_file = data;
  d.num_fewshot = 2;
  const auto items = detaudit::probes::items_load_dataset("gsm8k:" + data + ":1", d);
  REQUIRE(items.size() == 1);
  CHECK(items[0].prompt == "Question: C?\nAnswer: #### 3\n\nQuestion: A?\nAnswer:");
}
