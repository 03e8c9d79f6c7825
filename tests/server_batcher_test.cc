// The batching policy alone, with fake requests: budgets, delay, oversized
// requests, the queue limit, expired and cancelled requests, close.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "model/model.h"
#include "server/batcher.h"

namespace jagrank {
namespace {

using namespace std::chrono_literals;

struct Finished {
  std::mutex mu;
  std::vector<std::pair<int, Status::Code>> calls;  // (tag, code)
};

std::unique_ptr<QueuedRequest> Fake(int tag, int64_t candidates, int64_t history, Finished* finished) {
  auto r = std::make_unique<QueuedRequest>();
  r->candidates = candidates;
  r->history_tokens = history;
  r->attention_cost = history * history;
  r->finish = [tag, finished](const Status& s, const float*, int64_t, const std::string&) {
    std::lock_guard<std::mutex> lock(finished->mu);
    finished->calls.emplace_back(tag, s.code());
  };
  r->is_cancelled = [] { return false; };
  r->request_id = std::to_string(tag);
  return r;
}

int Tag(const std::unique_ptr<QueuedRequest>& r) { return std::stoi(r->request_id); }

BatchingConfig Budgets() {
  BatchingConfig c;
  c.max_queue_delay_us = 10 * 1000 * 1000;  // 10 s: only budgets close batches unless a test lowers it
  c.max_batch_requests = 100;
  c.max_batch_candidates = 10;
  c.max_batch_history_tokens = 1000;
  c.max_batch_attention_cost = 1000000;
  c.max_queue_requests = 100;
  return c;
}

double SecondsOf(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

TEST(BatcherTest, CandidateBudgetClosesTheBatchWithoutWaiting) {
  NullMetrics metrics;
  Finished finished;
  Batcher batcher(Budgets(), &metrics);
  for (int i = 0; i < 3; ++i) {
    auto r = Fake(i, 4, 1, &finished);
    ASSERT_TRUE(batcher.Enqueue(&r).ok());
  }
  std::vector<std::unique_ptr<QueuedRequest>> batch;
  const auto start = Clock::now();
  ASSERT_TRUE(batcher.NextBatch(&batch));
  EXPECT_LT(SecondsOf(Clock::now() - start), 1.0);
  ASSERT_EQ(batch.size(), 2u);  // 4 + 4 fit in 10; the third would make 12
  EXPECT_EQ(Tag(batch[0]), 0);
  EXPECT_EQ(Tag(batch[1]), 1);
  EXPECT_EQ(batcher.depth(), 1);
}

// Enqueue wakes a waiting NextBatch only when it must act: the first
// request, a budget reached. A push under every budget leaves it waiting for
// the oldest request's delay (10 s here); the push that fills a budget wakes
// it at once.
TEST(BatcherTest, APushThatFillsABudgetWakesAWaitingNextBatch) {
  NullMetrics metrics;
  Finished finished;
  Batcher batcher(Budgets(), &metrics);
  std::atomic<bool> returned{false};
  std::vector<std::unique_ptr<QueuedRequest>> batch;
  std::thread consumer([&] {
    EXPECT_TRUE(batcher.NextBatch(&batch));
    returned = true;
  });
  auto first = Fake(0, 4, 1, &finished);
  ASSERT_TRUE(batcher.Enqueue(&first).ok());
  std::this_thread::sleep_for(50ms);
  auto second = Fake(1, 4, 1, &finished);  // 8 of 10 candidates: no budget reached
  ASSERT_TRUE(batcher.Enqueue(&second).ok());
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(returned.load()) << "a batch closed under every budget and before the delay";
  const auto filled = Clock::now();
  auto third = Fake(2, 4, 1, &finished);  // 12 candidates queued: the candidate budget is reached
  ASSERT_TRUE(batcher.Enqueue(&third).ok());
  consumer.join();
  EXPECT_LT(SecondsOf(Clock::now() - filled), 5.0) << "the filling push did not wake NextBatch";
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(Tag(batch[0]), 0);
  EXPECT_EQ(Tag(batch[1]), 1);
  EXPECT_EQ(batcher.depth(), 1);
}

TEST(BatcherTest, HistoryAndAttentionBudgetsCloseBatches) {
  NullMetrics metrics;
  Finished finished;
  BatchingConfig c = Budgets();
  c.max_batch_candidates = 1000;
  c.max_batch_history_tokens = 100;
  Batcher by_tokens(c, &metrics);
  for (int i = 0; i < 3; ++i) {
    auto r = Fake(i, 1, 40, &finished);
    ASSERT_TRUE(by_tokens.Enqueue(&r).ok());
  }
  std::vector<std::unique_ptr<QueuedRequest>> batch;
  ASSERT_TRUE(by_tokens.NextBatch(&batch));
  EXPECT_EQ(batch.size(), 2u);

  c.max_batch_history_tokens = 100000;
  c.max_batch_attention_cost = 50 * 50 + 10 * 10;  // one long history + one short one
  Batcher by_cost(c, &metrics);
  for (int len : {50, 10, 50}) {
    auto r = Fake(len, 1, len, &finished);
    ASSERT_TRUE(by_cost.Enqueue(&r).ok());
  }
  ASSERT_TRUE(by_cost.NextBatch(&batch));
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(Tag(batch[1]), 10);
}

// Padded strategies pay R * (longest L)^2: one long history makes every
// request in the batch cost as much.
TEST(BatcherTest, PaddedAttentionCostCountsTheLongestHistoryForEveryRequest) {
  NullMetrics metrics;
  Finished finished;
  BatchingConfig c = Budgets();
  c.max_batch_candidates = 1000;
  c.max_batch_history_tokens = 100000;
  c.max_batch_attention_cost = 3 * 50 * 50;  // sum of squares would allow 50, 10, 10, 10, 10 ...
  Batcher padded(c, &metrics, PaddedAttentionCost);
  for (int len : {50, 10, 10, 10, 10}) {
    auto r = Fake(len, 1, len, &finished);
    ASSERT_TRUE(padded.Enqueue(&r).ok());
  }
  std::vector<std::unique_ptr<QueuedRequest>> batch;
  ASSERT_TRUE(padded.NextBatch(&batch));  // 5 * 50^2 > budget: closes at once
  EXPECT_EQ(batch.size(), 3u);            // 3 * 50^2 fits, a fourth does not
  Batcher jagged(c, &metrics, JaggedAttentionCost);
  for (int len : {50, 10, 10, 10, 10}) {
    auto r = Fake(len, 1, len, &finished);
    ASSERT_TRUE(jagged.Enqueue(&r).ok());
  }
  jagged.Close();  // no budget is reached: flush without the delay
  ASSERT_TRUE(jagged.NextBatch(&batch));
  EXPECT_EQ(batch.size(), 5u);
}

TEST(BatcherTest, DelayClosesAPartialBatch) {
  NullMetrics metrics;
  Finished finished;
  BatchingConfig c = Budgets();
  c.max_queue_delay_us = 30000;
  Batcher batcher(c, &metrics);
  auto r = Fake(0, 1, 1, &finished);
  ASSERT_TRUE(batcher.Enqueue(&r).ok());
  std::vector<std::unique_ptr<QueuedRequest>> batch;
  ASSERT_TRUE(batcher.NextBatch(&batch));
  EXPECT_EQ(batch.size(), 1u);
  EXPECT_GE(SecondsOf(Clock::now() - batch[0]->arrival), 0.029);
}

TEST(BatcherTest, OversizedRequestRunsAlone) {
  NullMetrics metrics;
  Finished finished;
  Batcher batcher(Budgets(), &metrics);
  auto big = Fake(0, 50, 1, &finished);
  auto small = Fake(1, 1, 1, &finished);
  ASSERT_TRUE(batcher.Enqueue(&big).ok());
  ASSERT_TRUE(batcher.Enqueue(&small).ok());
  std::vector<std::unique_ptr<QueuedRequest>> batch;
  ASSERT_TRUE(batcher.NextBatch(&batch));
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(Tag(batch[0]), 0);
}

TEST(BatcherTest, FullQueueRefusesAtOnceAndCallerKeepsTheRequest) {
  NullMetrics metrics;
  Finished finished;
  BatchingConfig c = Budgets();
  c.max_queue_requests = 2;
  Batcher batcher(c, &metrics);
  for (int i = 0; i < 2; ++i) {
    auto r = Fake(i, 1, 1, &finished);
    ASSERT_TRUE(batcher.Enqueue(&r).ok());
    EXPECT_EQ(r, nullptr);
  }
  auto third = Fake(2, 1, 1, &finished);
  Status s = batcher.Enqueue(&third);
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted);
  EXPECT_NE(s.message().find("max_queue_requests"), std::string::npos);
  EXPECT_NE(third, nullptr);
}

TEST(BatcherTest, ExpiredAndCancelledRequestsAreFinishedNotReturned) {
  NullMetrics metrics;
  Finished finished;
  Batcher batcher(Budgets(), &metrics);
  auto expired = Fake(0, 1, 1, &finished);
  // Admitted (a deadline already past is refused at the door), then expires
  // in the queue before the batch is taken.
  const Clock::time_point deadline = Clock::now() + 20ms;
  expired->deadline = deadline;
  auto cancelled = Fake(1, 1, 1, &finished);
  cancelled->is_cancelled = [] { return true; };
  auto live = Fake(2, 20, 1, &finished);  // fills the budget: no waiting
  ASSERT_TRUE(batcher.Enqueue(&expired).ok());
  ASSERT_TRUE(batcher.Enqueue(&cancelled).ok());
  ASSERT_TRUE(batcher.Enqueue(&live).ok());
  std::this_thread::sleep_until(deadline + 1ms);
  std::vector<std::unique_ptr<QueuedRequest>> batch;
  ASSERT_TRUE(batcher.NextBatch(&batch));
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(Tag(batch[0]), 2);
  std::lock_guard<std::mutex> lock(finished.mu);
  ASSERT_EQ(finished.calls.size(), 2u);
  EXPECT_EQ(finished.calls[0], std::make_pair(0, Status::Code::kDeadlineExceeded));
  EXPECT_EQ(finished.calls[1], std::make_pair(1, Status::Code::kCancelled));
}

// Deadline-aware admission: with recent batches of 10 requests taking
// 100 ms, a request behind 50 queued ones would finish in about
// 50 x 10 ms + 2 x 100 ms (+ the 1 ms batching delay) = 0.7 s: refused at
// once when its deadline is nearer (with half of it as margin),
// RESOURCE_EXHAUSTED naming the queue and the deadline; admitted when it is
// further. A deadline too short even for an empty queue is
// DEADLINE_EXCEEDED, whatever is queued. Requests without a deadline are always admitted, and
// before the first batch nothing is known to refuse on.
TEST(BatcherTest, AdmissionRefusesWhatWouldFinishAfterItsDeadline) {
  NullMetrics metrics;
  Finished finished;
  BatchingConfig config = Budgets();
  config.max_queue_delay_us = 1000;
  config.max_queue_requests = 1000;
  Batcher batcher(config, &metrics);
  auto early = Fake(0, 1, 1, &finished);
  early->deadline = Clock::now() + 1ms;
  ASSERT_TRUE(batcher.Enqueue(&early).ok()) << "refused before any batch was measured";
  batcher.RecordBatch(10, 0.1);
  EXPECT_NEAR(std::chrono::duration<double>(batcher.EstimatedFinishIn()).count(), 1 * 0.01 + 0.2 + 0.001, 1e-3);
  auto soon = Fake(1, 1, 1, &finished);
  soon->deadline = Clock::now() + 50ms;
  Status s = batcher.Enqueue(&soon);
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s.ToString();  // 50 ms: too short even alone
  for (int i = 0; i < 49; ++i) {
    auto r = Fake(10 + i, 1, 1, &finished);  // no deadline: always admitted
    ASSERT_TRUE(batcher.Enqueue(&r).ok());
  }
  EXPECT_NEAR(std::chrono::duration<double>(batcher.EstimatedFinishIn()).count(), 50 * 0.01 + 0.2 + 0.001, 1e-3);
  auto near = Fake(2, 1, 1, &finished);
  near->deadline = Clock::now() + 800ms;  // 0.701 s x 1.5 = 1.05 s > 0.8 s
  s = batcher.Enqueue(&near);
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("would not finish before its deadline: queue ~701 ms (50 requests ahead), deadline in"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(near, nullptr) << "a refused request stays with the caller";
  auto far = Fake(3, 1, 1, &finished);
  far->deadline = Clock::now() + 2s;
  EXPECT_TRUE(batcher.Enqueue(&far).ok());
  EXPECT_EQ(batcher.depth(), 51);
  auto tiny = Fake(5, 1, 1, &finished);
  tiny->deadline = Clock::now() + 50ms;
  s = batcher.Enqueue(&tiny);
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s.ToString();

  Batcher idle(config, &metrics);
  idle.RecordBatch(10, 0.1);
  auto short_deadline = Fake(4, 1, 1, &finished);
  short_deadline->deadline = Clock::now() + 50ms;
  s = idle.Enqueue(&short_deadline);
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s.ToString();
}

// dispatch_when_idle: with a 10 s delay and no budget reached, a batch
// closes at once while the executor has no batch waiting, and waits (for
// the delay) while it has one; clearing the flag releases the wait.
// Without dispatch_when_idle the flag changes nothing.
TEST(BatcherTest, DispatchWhenIdleClosesAtOnceWhileTheExecutorHasNoBatchWaiting) {
  for (const bool dispatch_when_idle : {true, false}) {
    SCOPED_TRACE(dispatch_when_idle ? "dispatch_when_idle" : "delay only");
    NullMetrics metrics;
    Finished finished;
    BatchingConfig c = Budgets();  // 10 s delay
    c.dispatch_when_idle = dispatch_when_idle;
    Batcher batcher(c, &metrics);
    std::vector<std::unique_ptr<QueuedRequest>> batch;
    std::atomic<bool> got{false};
    auto r = Fake(0, 1, 1, &finished);
    ASSERT_TRUE(batcher.Enqueue(&r).ok());
    if (dispatch_when_idle) {
      // Nothing is waiting in the executor at start: the first request goes at once.
      const auto start = Clock::now();
      ASSERT_TRUE(batcher.NextBatch(&batch));
      EXPECT_LT(SecondsOf(Clock::now() - start), 1.0);
      EXPECT_EQ(batch.size(), 1u);
      r = Fake(1, 1, 1, &finished);
      ASSERT_TRUE(batcher.Enqueue(&r).ok());
    }
    batcher.SetExecutorHasBatchWaiting(true);
    std::thread consumer([&] { got = batcher.NextBatch(&batch); });
    std::this_thread::sleep_for(100ms);
    EXPECT_FALSE(got) << "closed while the executor had a batch waiting";
    const auto released_at = Clock::now();
    batcher.SetExecutorHasBatchWaiting(false);
    if (!dispatch_when_idle) {
      std::this_thread::sleep_for(100ms);
      EXPECT_FALSE(got) << "the flag closed a batch without dispatch_when_idle";
      batcher.Close();  // ends the 10 s wait
    }
    consumer.join();
    EXPECT_TRUE(got);
    ASSERT_EQ(batch.size(), 1u);
    EXPECT_EQ(Tag(batch[0]), dispatch_when_idle ? 1 : 0);
    if (dispatch_when_idle) {
      EXPECT_LT(SecondsOf(Clock::now() - released_at), 1.0);
    }
  }
}

// Two executors on one batcher: with dispatch_when_idle a batch closes at
// once while either executor has no batch waiting, and waits (for the
// delay) only while both have one.
TEST(BatcherTest, DispatchWhenIdleWithTwoExecutorsWaitsOnlyWhileBothHaveABatchWaiting) {
  NullMetrics metrics;
  Finished finished;
  BatchingConfig c = Budgets();  // 10 s delay
  c.dispatch_when_idle = true;
  Batcher batcher(c, &metrics, JaggedAttentionCost, /*executors=*/2);
  std::vector<std::unique_ptr<QueuedRequest>> batch;
  batcher.SetExecutorHasBatchWaiting(true);  // the first executor has one; the second none
  auto r = Fake(0, 1, 1, &finished);
  ASSERT_TRUE(batcher.Enqueue(&r).ok());
  const auto start = Clock::now();
  ASSERT_TRUE(batcher.NextBatch(&batch));
  EXPECT_LT(SecondsOf(Clock::now() - start), 1.0);
  batcher.SetExecutorHasBatchWaiting(true);  // now both have one
  r = Fake(1, 1, 1, &finished);
  ASSERT_TRUE(batcher.Enqueue(&r).ok());
  std::atomic<bool> got{false};
  std::thread consumer([&] { got = batcher.NextBatch(&batch); });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(got) << "closed while both executors had a batch waiting";
  const auto released_at = Clock::now();
  batcher.SetExecutorHasBatchWaiting(false);  // one of them took its batch
  consumer.join();
  EXPECT_TRUE(got);
  EXPECT_LT(SecondsOf(Clock::now() - released_at), 1.0);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(Tag(batch[0]), 1);
}

TEST(BatcherTest, CloseFlushesWithoutDelayThenEnds) {
  NullMetrics metrics;
  Finished finished;
  Batcher batcher(Budgets(), &metrics);  // 10 s delay
  auto r = Fake(0, 1, 1, &finished);
  ASSERT_TRUE(batcher.Enqueue(&r).ok());
  std::vector<std::unique_ptr<QueuedRequest>> batch;
  std::atomic<bool> got{false};
  std::thread consumer([&] {
    got = batcher.NextBatch(&batch);
  });
  std::this_thread::sleep_for(20ms);  // let the consumer start waiting on the delay
  const auto closed_at = Clock::now();
  batcher.Close();
  consumer.join();
  EXPECT_LT(SecondsOf(Clock::now() - closed_at), 1.0);
  EXPECT_TRUE(got);
  EXPECT_EQ(batch.size(), 1u);
  auto late = Fake(1, 1, 1, &finished);
  EXPECT_EQ(batcher.Enqueue(&late).code(), Status::Code::kUnavailable);
  EXPECT_FALSE(batcher.NextBatch(&batch));
}

}  // namespace
}  // namespace jagrank
