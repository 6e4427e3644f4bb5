// Starts the pinned SQS emulator (npm local-aws-sqs) on 127.0.0.1:<port>.
// Usage: node sqs-server.mjs <port>. Prints "ready <port>" once it listens.
import { createSqsServer } from "local-aws-sqs";

const port = Number(process.argv[2] || process.env.SQS_PORT || 9324);
if (!Number.isInteger(port) || port <= 0) {
  console.error(`sqs-server: invalid port ${process.argv[2]}`);
  process.exit(2);
}
await createSqsServer({
  port,
  hostname: "127.0.0.1",
  // Queues are created by the local runtime from the shared topology; tests
  // recreate names quickly, so skip AWS's 60 s delete-then-create wait.
  emulateQueueCreationLifecycle: false,
});
console.log(`ready ${port}`);
const stop = () => process.exit(0);
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
