/** What the TypeScript tests share: the live server's address, unique names, and stores that clean up. */
import { randomUUID } from "node:crypto";
import net from "node:net";
import { after, before } from "node:test";
import { ContextfoldClient, type InjectionReport } from "../src/index.js";

export const address = process.env.CONTEXTFOLD_ADDRESS ?? "";
if (!address) throw new Error("CONTEXTFOLD_ADDRESS must name a running contextfold server (make test sets it)");

export function unique(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/** A client, and stores made for one test file that are deleted when it is done. */
export class Fixture {
  readonly cf = new ContextfoldClient({ address, timeoutMs: 30_000 });
  private readonly stores: string[] = [];

  async store(prefix: string, contents: { id?: string; content: string; userId?: string }[] = []): Promise<string> {
    const name = unique(prefix);
    await this.cf.memory.createStore({ store: { name } });
    this.stores.push(name);
    if (contents.length > 0) await this.cf.memory.addMemories({ store: name, memories: contents });
    return name;
  }

  async close(): Promise<void> {
    for (const name of this.stores) await this.cf.memory.deleteStore({ name, force: true });
    this.cf.close();
  }
}

/**
 * A store of Ana's tea (`{store}-tea`) and cat (`{store}-cat`, Miso) and Bob's dog (`{store}-dog`,
 * Rex), each under its user: what the framework adapters' agents are asked about.
 */
export async function petsAndTea(fixture: Fixture): Promise<string> {
  const name = await fixture.store("pets");
  await fixture.cf.memory.addMemories({
    store: name,
    memories: [
      { id: `${name}-tea`, content: "Ana drinks green tea every morning", userId: "ana" },
      { id: `${name}-cat`, content: "Ana's cat is called Miso", userId: "ana" },
      { id: `${name}-dog`, content: "Bob's dog is called Rex", userId: "bob" },
    ],
  });
  return name;
}

/** `petsAndTea`'s store for one test file: made before its tests, deleted after; `name` once made. */
export function petsAndTeaStore(): { name: string } {
  const fixture = new Fixture();
  const store = { name: "" };
  before(async () => {
    store.name = await petsAndTea(fixture);
  });
  after(() => fixture.close());
  return store;
}

/** Every report an adapter's calls came back with (give `reports.add` as its `onReport`). */
export class Reports {
  readonly got: InjectionReport[] = [];
  readonly add = (report: InjectionReport): void => void this.got.push(report);

  entries(index: number): string[] {
    return this.got[index].entries.map((entry) => entry.id);
  }
}

/** Warnings an adapter said (give it as its `logger`). */
export class Warnings {
  readonly said: string[] = [];
  warn(message: string): void {
    this.said.push(message);
  }
}

/** A loopback port nothing listens on: a service that is down. */
export async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A loopback port that accepts connections and never answers: a service that hangs. */
export async function silentServer(): Promise<{ port: number; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => sockets.add(socket));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A loopback port relaying to `target` (host:port) until `cut()`: then the service is down for whoever dials it. */
export async function relay(target: string): Promise<{ address: string; cut: () => Promise<void> }> {
  const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((inbound) => {
    const outbound = net.connect(port, host);
    for (const socket of [inbound, outbound]) {
      sockets.add(socket);
      socket.on("error", () => socket.destroy());
      socket.on("close", () => sockets.delete(socket));
    }
    inbound.pipe(outbound).pipe(inbound);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    cut: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
