// StreamIndex adds two indexes to the stream-record table of a running
// DynamoDB Local's database file (run by internal/dev/emulator with the Java source
// launcher and DynamoDB Local's own sqlite4java on the class path).
//
// DynamoDB Local finds a stream's first sequence number on every write to a
// table with a stream ("SELECT MIN(SequenceNumber) FROM us WHERE
// StreamID=?"). The table "us" holds every stream record of the last 24
// hours, in sequence-number order, with no index on StreamID, so that
// lookup reads past the records of every stream created before the
// table's own: in a test run, where each test creates its table, every
// table's writes are slower than the last table's. With an index on
// (StreamID, SequenceNumber) the lookup is a seek; the one on (ShardID,
// SequenceNumber) serves the shard lookups and GetRecords the same way.
// The figures are in the README (Emulator notes).
//
// Usage: java -Dsqlite4java.library.path=<lib> -cp <lib>/sqlite4java.jar
// StreamIndex.java <database file>
import com.almworks.sqlite4java.SQLiteConnection;
import java.io.File;
import java.util.logging.Level;
import java.util.logging.Logger;

public class StreamIndex {
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: StreamIndex <DynamoDB Local database file>");
            System.exit(2);
        }
        Logger.getLogger("com.almworks.sqlite4java").setLevel(Level.WARNING);
        SQLiteConnection db = new SQLiteConnection(new File(args[0]));
        try {
            db.open(false); // the file exists: DynamoDB Local created it
            db.setBusyTimeout(30_000); // DynamoDB Local holds the file between its own writes
            db.exec("CREATE INDEX IF NOT EXISTS ojs_us_stream ON us(StreamID, SequenceNumber)");
            db.exec("CREATE INDEX IF NOT EXISTS ojs_us_shard ON us(ShardID, SequenceNumber)");
        } finally {
            db.dispose();
        }
    }
}
