"""The labelled set of bench/bench_quality.py, written for this project (no public dataset's text).

Eight sessions of an agent gateway's conversations (loans, travel, code errors, health, recipes,
home, work, car), each a list of assistant messages in English, Swedish, Italian, German and
Spanish, short (a line) and long (a paragraph). Each message is the answer to three questions:
a natural-language question in its own language, one in another language (the cross-language
pairs), and a keyword question (words the message holds, as a person types them into a search box).
"""

from __future__ import annotations

from dataclasses import dataclass

LANGUAGES = ("en", "sv", "it", "de", "es")


@dataclass(frozen=True)
class Message:
    id: str
    session: str
    lang: str
    text: str


@dataclass(frozen=True)
class Question:
    text: str
    lang: str
    kind: str  # "natural" or "keyword"
    target: str  # the id of the message that answers it
    target_lang: str
    target_chars: int

    @property
    def cross(self) -> bool:
        return self.lang != self.target_lang


# (session, language, message, [(question language, "n" natural | "k" keyword, question)])
_SET: list[tuple[str, str, str, list[tuple[str, str, str]]]] = [
    # --- loans ---------------------------------------------------------------------------------------------
    ("loans", "sv", "Banken erbjöd oss ett bolån med bunden ränta på 3,4 procent i fem år; den rörliga ligger just "
     "nu på 3,9.",
     [("sv", "n", "Vilken ränta fick vi på bolånet om vi binder den?"),
      ("en", "n", "What fixed interest rate did the bank offer for our home loan?"),
      ("sv", "k", "bunden ränta")]),
    ("loans", "en", "Loan approved: €18,000 over 60 months.",
     [("en", "n", "Did the personal loan application go through?"),
      ("it", "n", "Il prestito è stato approvato? Di quanto?"),
      ("en", "k", "loan approved")]),
    ("loans", "it", "Ho confrontato tre offerte per il mutuo della casa a Bologna. Intesa propone un tasso fisso del "
     "3,2% con spese di istruttoria di 800 euro; la banca locale chiede il 3,5% ma senza spese e con la possibilità "
     "di estinzione anticipata gratuita; l'ultima, online, ha il tasso più basso (2,9%) ma richiede di aprire un conto "
     "corrente e sottoscrivere un'assicurazione sulla vita. Con la nostra rata massima di 1.100 euro al mese, la banca "
     "locale resta la scelta più prudente se pensiamo di vendere entro dieci anni.",
     [("it", "n", "Quale banca conviene se vogliamo vendere casa tra qualche anno?"),
      ("en", "n", "Which mortgage offer had no fees and free early repayment?"),
      ("it", "k", "estinzione anticipata")]),
    ("loans", "de", "Die Schufa-Auskunft ist da: Score 97,8 Prozent, keine negativen Einträge. Damit sollte der Kredit "
     "für das Auto kein Problem sein.",
     [("de", "n", "Wie sieht meine Bonität aus?"),
      ("es", "n", "¿Qué puntuación de crédito tengo según el informe?"),
      ("de", "k", "Schufa Score")]),
    ("loans", "es", "Si amortizas 5.000 € este año, la cuota baja a 612 € o puedes mantener la cuota y acortar el plazo "
     "en unos tres años.",
     [("es", "n", "¿Qué pasa si pago una parte de la hipoteca antes de tiempo?"),
      ("en", "n", "What happens to my monthly payment if I pay off part of the mortgage early?"),
      ("es", "k", "amortizas cuota plazo")]),
    ("loans", "en", "Here's the breakdown for consolidating the credit cards: the Visa has 4,200 at 22.9% APR, the store "
     "card 1,150 at 29.9%, and the Mastercard 2,600 at 19.5%. A consolidation loan of 8,000 at 9.4% over three years "
     "costs about 256 a month, against roughly 310 in minimum payments now, and you'd save around 2,100 in interest "
     "overall. The catch is the 3% origination fee and that it only works if you stop using the cards; I'd close the "
     "store card at least.",
     [("en", "n", "Is it worth combining my credit card debts into one loan?"),
      ("sv", "n", "Hur mycket sparar jag i ränta om jag samlar mina kreditkortsskulder?"),
      ("en", "k", "consolidation loan origination fee")]),
    ("loans", "sv", "Studielånet är slutbetalt!",
     [("sv", "n", "Har jag betalat klart lånet från CSN?"),
      ("de", "n", "Ist mein Studienkredit schon abbezahlt?"),
      ("sv", "k", "studielånet")]),
    ("loans", "de", "Ich habe den Tilgungsplan für die Wohnung durchgerechnet: Bei 320.000 Euro Darlehen, 3,6 Prozent "
     "Sollzins und 2 Prozent anfänglicher Tilgung liegt die Monatsrate bei 1.493 Euro. Nach zehn Jahren Zinsbindung "
     "bleiben rund 237.000 Euro Restschuld. Wenn wir die Tilgung auf 3 Prozent erhöhen, steigt die Rate auf etwa "
     "1.760 Euro, aber die Restschuld sinkt auf 195.000 Euro und wir sind gut sechs Jahre früher schuldenfrei. "
     "Sondertilgungen von 5 Prozent jährlich sind im Vertrag erlaubt.",
     [("de", "n", "Wie viel bleibt nach der Zinsbindung noch offen?"),
      ("en", "n", "How much will we still owe after the ten-year fixed period?"),
      ("de", "k", "Restschuld Sondertilgungen")]),
    ("loans", "it", "Rata di giugno pagata, ricevuta salvata nella cartella Banca.",
     [("it", "n", "Ho già pagato la rata di questo mese?"),
      ("es", "n", "¿Ya se pagó la cuota de junio?"),
      ("it", "k", "ricevuta rata giugno")]),
    ("loans", "en", "The car dealer's 0% financing hides a 1,500 'admin fee'; the credit union's 5.2% loan is cheaper "
     "in total.",
     [("en", "n", "Is the dealership's zero percent offer really the cheapest?"),
      ("de", "n", "Ist die Null-Prozent-Finanzierung des Händlers wirklich günstiger?"),
      ("en", "k", "admin fee financing")]),
    # --- travel --------------------------------------------------------------------------------------------
    ("travel", "en", "Your flight LH 2419 from Munich to Stockholm departs at 07:15 from Terminal 2, gate K14; boarding "
     "closes 20 minutes before.",
     [("en", "n", "When does boarding close for my morning flight to Sweden?"),
      ("sv", "n", "Från vilken gate går flyget till Stockholm?"),
      ("en", "k", "LH 2419 gate")]),
    ("travel", "sv", "Tågresan till Kiruna: nattåget går från Stockholm C kl 18:03 och är framme 09:48 nästa morgon. Jag "
     "bokade en sovkupé för två med eget handfat, frukost ingår inte men det finns en restaurangvagn till kl 22. Tänk "
     "på att ta med varma kläder, det är minus 25 grader i Abisko den här veckan och norrskensturen med hundspann "
     "startar redan kl 20 samma kväll som vi kommer fram. Biljetterna ligger i SJ-appen under ditt namn.",
     [("sv", "n", "Vad ska vi packa för kylan uppe i norr?"),
      ("en", "n", "What time does the night train to Lapland arrive?"),
      ("sv", "k", "sovkupé nattåget")]),
    ("travel", "it", "Il traghetto per Olbia parte da Livorno alle 22:00; abbiamo una cabina interna e l'auto nel garage "
     "del ponte 3.",
     [("it", "n", "A che ora si parte per la Sardegna?"),
      ("en", "n", "Where did we leave the car on the ferry?"),
      ("it", "k", "traghetto Olbia cabina")]),
    ("travel", "de", "Reisepass läuft im August ab – vor der Japanreise verlängern!",
     [("de", "n", "Ist mein Pass noch gültig für die Reise?"),
      ("it", "n", "Il mio passaporto è ancora valido per il viaggio in Giappone?"),
      ("de", "k", "Reisepass verlängern")]),
    ("travel", "es", "He reservado el hotel en Sevilla del 14 al 17 de abril, habitación doble con vistas a la Giralda, "
     "cancelación gratuita hasta 48 horas antes.",
     [("es", "n", "¿Hasta cuándo puedo anular la reserva sin pagar?"),
      ("en", "n", "Can I still cancel the Seville hotel for free?"),
      ("es", "k", "Giralda habitación doble")]),
    ("travel", "en", "I checked your travel insurance for the ski trip: the basic plan covers medical costs up to 1 "
     "million and repatriation, but winter sports are excluded unless you add the 'Snow' module for 24 extra. "
     "Off-piste skiing is only covered when you're with a certified guide. Lost or stolen equipment is reimbursed up "
     "to 800 with a police report filed within 24 hours. Cancellation is covered if you or a close relative fall ill, "
     "not for bad snow conditions.",
     [("en", "n", "Am I covered if I break my leg skiing?"),
      ("es", "n", "¿El seguro de viaje cubre esquiar fuera de pista?"),
      ("en", "k", "off-piste certified guide")]),
    ("travel", "sv", "Hyrbilen hämtas på Arlanda, Hertz-disken i terminal 5; glöm inte körkortet och kreditkortet i "
     "ditt namn.",
     [("sv", "n", "Vad behöver jag ta med för att hämta bilen på flygplatsen?"),
      ("de", "n", "Was brauche ich, um den Mietwagen am Flughafen abzuholen?"),
      ("sv", "k", "hyrbilen Arlanda")]),
    ("travel", "de", "Der ICE nach Hamburg fällt heute aus; die Bahn empfiehlt den IC um 14:37 mit Umstieg in Hannover, "
     "Zugbindung ist aufgehoben.",
     [("de", "n", "Wie komme ich heute trotzdem nach Hamburg?"),
      ("en", "n", "My train to Hamburg got cancelled, what's the alternative?"),
      ("de", "k", "Zugbindung aufgehoben")]),
    ("travel", "it", "Itinerario per la settimana in Puglia: lunedì arrivo a Bari e pomeriggio nella città vecchia, "
     "martedì Alberobello con i trulli e pranzo a Locorotondo, mercoledì grotte di Castellana la mattina e Polignano a "
     "Mare al tramonto, giovedì trasferimento a Lecce con sosta a Ostuni, venerdì spiaggia a Torre dell'Orso, sabato "
     "giro in barca a Otranto. Conviene noleggiare l'auto dal primo giorno perché i treni locali non arrivano ovunque "
     "e la domenica quasi non circolano.",
     [("it", "n", "Che giorno andiamo a vedere i trulli?"),
      ("sv", "n", "Vilken dag i resplanen besöker vi grottorna?"),
      ("it", "k", "Alberobello Locorotondo")]),
    ("travel", "es", "Vuelo retrasado dos horas, llegamos a Lima a medianoche.",
     [("es", "n", "¿A qué hora aterrizamos en Perú al final?"),
      ("en", "n", "How late is our flight to Lima?"),
      ("es", "k", "vuelo retrasado Lima")]),
    # --- code errors ---------------------------------------------------------------------------------------
    ("code", "en", "The TypeError 'NoneType object is not subscriptable' came from get_user() returning None when the "
     "session cookie expired.",
     [("en", "n", "Why did the app crash when the login session ran out?"),
      ("de", "n", "Woher kam der Fehler, als das Sitzungs-Cookie abgelaufen war?"),
      ("en", "k", "NoneType not subscriptable")]),
    ("code", "en", "The build breaks only in CI because the Docker image uses Alpine, and the wheel for cryptography "
     "needs musl-compatible binaries that weren't published for the pinned version. Locally you're on Debian so pip "
     "grabs the manylinux wheel. Three options: switch the base image to python:3.12-slim, pin cryptography to 42.0.5 "
     "which ships musllinux wheels, or install rust and openssl-dev in the image so it builds from source (slow, adds "
     "about four minutes). I'd go with the slim image; it also avoids the DNS resolution quirks we had with musl last "
     "month.",
     [("en", "n", "Why does the pipeline fail when my laptop build works fine?"),
      ("it", "n", "Perché la build fallisce solo nell'integrazione continua e non in locale?"),
      ("en", "k", "Alpine musllinux cryptography")]),
    ("code", "sv", "Felet 'connection refused' på port 5432 berodde på att Postgres-containern inte hade startat klart; "
     "jag lade till en healthcheck.",
     [("sv", "n", "Varför kunde appen inte nå databasen vid uppstart?"),
      ("en", "n", "How did you fix the database connection being refused at startup?"),
      ("sv", "k", "connection refused healthcheck")]),
    ("code", "de", "Der Speicherverbrauch wächst, weil der Cache nie geleert wird; ein LRU mit maximal 10.000 Einträgen "
     "löst das.",
     [("de", "n", "Warum braucht der Dienst mit der Zeit immer mehr RAM?"),
      ("es", "n", "¿Por qué el servicio consume cada vez más memoria?"),
      ("de", "k", "Speicherverbrauch LRU Cache")]),
    ("code", "it", "Risolto: mancava un await davanti a fetch().",
     [("it", "n", "Qual era il problema con la chiamata asincrona?"),
      ("en", "n", "What was the bug with the async request?"),
      ("it", "k", "await fetch")]),
    ("code", "es", "El error 'CORS policy: No Access-Control-Allow-Origin header' aparece porque el frontend en "
     "localhost:3000 llama directamente a la API en el puerto 8080. En producción no pasa porque ambos están detrás del "
     "mismo dominio con nginx. Para desarrollo tienes dos opciones: configurar el proxy de Vite para que reenvíe /api a "
     "8080, o añadir el middleware de CORS en FastAPI permitiendo solo el origen localhost:3000. No uses "
     "allow_origins=['*'] con credenciales, el navegador lo rechaza igualmente.",
     [("es", "n", "¿Por qué el navegador bloquea las peticiones a la API en desarrollo?"),
      ("en", "n", "How do I fix the cross-origin error when the frontend calls the backend locally?"),
      ("es", "k", "CORS proxy Vite")]),
    ("code", "en", "Segfault fixed: the buffer was freed twice.",
     [("en", "n", "What caused the crash in the C code?"),
      ("sv", "n", "Vad orsakade kraschen i C-programmet?"),
      ("en", "k", "segfault buffer freed")]),
    ("code", "sv", "Jag har gått igenom varför testerna är instabila: tre av dem delar samma temporära katalog och kör "
     "parallellt med xdist, så ibland skriver ett test över en fil som ett annat läser. Dessutom använder test_export "
     "datetime.now() och jämför med en fast sträng, vilket misslyckas strax efter midnatt. Lösningen är att använda "
     "tmp_path-fixturen per test och frysa klockan med freezegun. Efter ändringarna har jag kört sviten 200 gånger i "
     "rad utan ett enda fel.",
     [("sv", "n", "Varför misslyckas testerna ibland utan att koden ändrats?"),
      ("en", "n", "Why were the tests flaky and how was it fixed?"),
      ("sv", "k", "xdist freezegun")]),
    ("code", "de", "Git meldet 'detached HEAD', weil du direkt einen Commit ausgecheckt hast. Deine Änderungen sind "
     "nicht verloren: leg mit git switch -c rettung einen Branch an, bevor du wieder auf main wechselst.",
     [("de", "n", "Sind meine Änderungen weg, nachdem ich einen alten Commit ausgecheckt habe?"),
      ("en", "n", "Did I lose my work after checking out an old commit?"),
      ("de", "k", "detached HEAD Branch")]),
    ("code", "it", "L'errore 413 Request Entity Too Large viene da nginx: client_max_body_size è ancora a 1m, va "
     "portato a 50m per gli upload.",
     [("it", "n", "Perché non riesco a caricare file grandi?"),
      ("de", "n", "Warum schlägt das Hochladen großer Dateien fehl?"),
      ("it", "k", "413 nginx upload")]),
    # --- health --------------------------------------------------------------------------------------------
    ("health", "en", "Your blood test shows vitamin D at 18 ng/mL, which is low; the doctor suggests 2,000 IU daily and "
     "a recheck in three months.",
     [("en", "n", "What did the lab results say about my vitamins?"),
      ("it", "n", "Cosa dicevano le analisi del sangue sulla vitamina?"),
      ("en", "k", "vitamin D recheck")]),
    ("health", "sv", "Tandläkartiden flyttades till torsdag kl 8:30 på Folktandvården Södermalm.",
     [("sv", "n", "När ska jag till tandläkaren?"),
      ("es", "n", "¿Cuándo es la cita con el dentista?"),
      ("sv", "k", "tandläkartiden torsdag")]),
    ("health", "it", "Riassunto della visita dal fisioterapista per il ginocchio: non c'è lesione al menisco, si tratta "
     "di una tendinite rotulea dovuta all'aumento troppo rapido dei chilometri di corsa. Per tre settimane niente "
     "corsa, solo bici e nuoto; ghiaccio per 15 minuti dopo l'allenamento; esercizi eccentrici di squat su piano "
     "inclinato tre volte al giorno, 3 serie da 15. Poi si riprende a correre gradualmente, aumentando al massimo del "
     "10% a settimana. Prossimo controllo il 12 del mese prossimo.",
     [("it", "n", "Quando posso tornare a correre dopo il problema al ginocchio?"),
      ("en", "n", "What exercises did the physio give me for my knee?"),
      ("it", "k", "tendinite rotulea menisco")]),
    ("health", "de", "Ibuprofen nicht zusammen mit Blutverdünner nehmen!",
     [("de", "n", "Darf ich Schmerzmittel nehmen, wenn ich Gerinnungshemmer bekomme?"),
      ("en", "n", "Can I take painkillers with my blood thinners?"),
      ("de", "k", "Ibuprofen Blutverdünner")]),
    ("health", "es", "Para el insomnio: nada de pantallas una hora antes de dormir, misma hora de acostarse cada día y "
     "evitar el café después de las 14:00.",
     [("es", "n", "¿Qué puedo hacer para descansar mejor por la noche?"),
      ("sv", "n", "Vad kan jag göra för att sova bättre på nätterna?"),
      ("es", "k", "insomnio pantallas café")]),
    ("health", "en", "Summary of the allergy consultation: the skin prick test was strongly positive for birch pollen "
     "and mildly positive for cat dander; grass and dust mites were negative. That explains the itchy mouth when you "
     "eat raw apples, a cross-reaction called oral allergy syndrome. For spring, start the nasal steroid spray two "
     "weeks before the birch season and take a non-drowsy antihistamine on high-pollen days. Immunotherapy tablets are "
     "an option if symptoms stay bad after this season; it takes three years.",
     [("en", "n", "Why does my mouth itch when I eat apples?"),
      ("de", "n", "Worauf bin ich laut dem Allergietest allergisch?"),
      ("en", "k", "birch pollen antihistamine")]),
    ("health", "sv", "Vaccinationen mot TBE: andra dosen om en månad, tredje efter ett år, sedan påfyllnad vart femte "
     "år.",
     [("sv", "n", "När ska jag ta nästa spruta mot fästingburen sjukdom?"),
      ("en", "n", "When is my next tick vaccine shot due?"),
      ("sv", "k", "TBE dosen")]),
    ("health", "de", "Ergebnis der Blutdruckmessung über 24 Stunden: Tagesmittel 142/91, nachts 128/79, also eine "
     "leichte Hypertonie ohne ausreichende nächtliche Absenkung. Die Ärztin möchte zunächst drei Monate ohne "
     "Medikamente abwarten: weniger Salz (unter 5 Gramm am Tag), Alkohol reduzieren, 150 Minuten Ausdauersport pro "
     "Woche und zwei bis drei Kilo abnehmen. Danach wird erneut gemessen; liegt der Wert dann noch über 135/85, wird "
     "ein ACE-Hemmer verschrieben.",
     [("de", "n", "Muss ich wegen meines Blutdrucks jetzt Tabletten nehmen?"),
      ("it", "n", "Devo prendere farmaci per la pressione alta?"),
      ("de", "k", "Hypertonie ACE-Hemmer")]),
    ("health", "it", "Febbre scesa a 37,2 stamattina.",
     [("it", "n", "Come va la temperatura oggi?"),
      ("en", "n", "Is the fever going down?"),
      ("it", "k", "febbre scesa")]),
    ("health", "es", "El pediatra dice que la erupción del niño es una varicela leve: paracetamol si tiene fiebre y que "
     "no vaya a la guardería esta semana.",
     [("es", "n", "¿Qué tiene el niño en la piel?"),
      ("de", "n", "Darf das Kind mit den Windpocken in die Kita?"),
      ("es", "k", "varicela guardería")]),
    # --- recipes -------------------------------------------------------------------------------------------
    ("recipes", "it", "Per la carbonara come si deve: guanciale a listarelle rosolato in padella senza olio finché "
     "diventa croccante, spegni il fuoco. In una ciotola sbatti 4 tuorli e un uovo intero con 60 grammi di pecorino "
     "romano e molto pepe nero. Scola i rigatoni al dente tenendo un mestolo d'acqua di cottura, versali nella padella "
     "col guanciale, poi aggiungi le uova fuori dal fuoco mescolando veloce e allungando con l'acqua finché la crema è "
     "lucida. Niente panna, niente aglio.",
     [("it", "n", "Come si fa la crema senza che le uova diventino frittata?"),
      ("en", "n", "How do I make a real carbonara without cream?"),
      ("it", "k", "guanciale pecorino tuorli")]),
    ("recipes", "sv", "Kanelbullarna: degen ska jäsa 45 minuter, sedan fyllning med smör, socker och kanel, och grädda i "
     "225 grader i 8 minuter.",
     [("sv", "n", "Hur länge ska bullarna vara i ugnen?"),
      ("de", "n", "Bei welcher Temperatur werden die Zimtschnecken gebacken?"),
      ("sv", "k", "kanelbullarna grädda")]),
    ("recipes", "en", "Swap buttermilk: 1 cup milk plus 1 tbsp lemon juice, rest 10 minutes.",
     [("en", "n", "What can I use if I don't have buttermilk for the pancakes?"),
      ("es", "n", "¿Cómo sustituyo el suero de leche en la receta?"),
      ("en", "k", "buttermilk lemon juice")]),
    ("recipes", "de", "Für den Sauerbraten das Fleisch drei Tage in Rotwein, Essig, Zwiebeln, Lorbeer und Wacholder "
     "einlegen, täglich wenden.",
     [("de", "n", "Wie lange muss das Fleisch vorher mariniert werden?"),
      ("en", "n", "How many days does the pot roast need to marinate?"),
      ("de", "k", "Sauerbraten Wacholder")]),
    ("recipes", "es", "Para la paella valenciana de este domingo necesitamos: un pollo de corral troceado, medio conejo, "
     "400 g de judía verde plana, 200 g de garrofó, tomate rallado, pimentón dulce, azafrán en hebras, 400 g de arroz "
     "bomba y aceite de oliva. Se sofríe la carne a fuego fuerte hasta dorarla, luego la verdura, el tomate y el "
     "pimentón, se añade el agua (unos tres litros para la paella de 50 cm) y el azafrán, y cuando hierva se reparte "
     "el arroz. Veinte minutos sin remover y cinco de reposo tapada con un paño. El socarrat se hace subiendo el fuego "
     "el último minuto.",
     [("es", "n", "¿Cuánto tiempo se deja cocer el arroz y hay que moverlo?"),
      ("it", "n", "Quali ingredienti servono per la paella di domenica?"),
      ("es", "k", "garrofó azafrán socarrat")]),
    ("recipes", "en", "Bread came out dense again: the starter wasn't active enough, so wait until it doubles and passes "
     "the float test before mixing.",
     [("en", "n", "Why is my homemade loaf so heavy?"),
      ("sv", "n", "Varför blev brödet så kompakt?"),
      ("en", "k", "starter float test")]),
    ("recipes", "sv", "Inför midsommar: sillen ska läggas in senast torsdag, tre sorter – senapssill, löksill och "
     "matjessill med gräddfil och gräslök. Färskpotatisen köper vi på torget på fredag morgon och kokar med mycket "
     "dill. Jordgubbstårtan gör vi med sockerkaksbotten dagen innan, vispar grädden först på lördagen. Räkna med tolv "
     "personer, varav två vegetarianer som får en västerbottenpaj. Snapsvisorna finns i den gröna pärmen.",
     [("sv", "n", "Vad ska de som inte äter kött få på midsommarfesten?"),
      ("en", "n", "What are we serving the vegetarians at the midsummer party?"),
      ("sv", "k", "senapssill matjessill")]),
    ("recipes", "it", "Il tiramisù va in frigo almeno sei ore; usa savoiardi secchi e bagnali nel caffè freddo solo un "
     "attimo.",
     [("it", "n", "Quanto deve riposare il dolce prima di servirlo?"),
      ("es", "n", "¿Cuántas horas tiene que estar el tiramisú en la nevera?"),
      ("it", "k", "savoiardi caffè")]),
    ("recipes", "de", "Hefe war abgelaufen – deshalb ging der Teig nicht auf.",
     [("de", "n", "Warum ist der Teig nicht aufgegangen?"),
      ("sv", "n", "Varför jäste inte degen?"),
      ("de", "k", "Hefe abgelaufen")]),
    ("recipes", "es", "Gazpacho: añadir un poco de pan remojado para que quede más cremoso.",
     [("es", "n", "¿Cómo hago la sopa fría más espesa?"),
      ("en", "n", "How do I make the cold tomato soup creamier?"),
      ("es", "k", "gazpacho pan remojado")]),
    # --- home ----------------------------------------------------------------------------------------------
    ("home", "sv", "Flyttfirman kommer den 28 maj kl 7; de packar köket men vi måste själva tömma förrådet i källaren.",
     [("sv", "n", "Vad måste vi göra själva inför flytten?"),
      ("en", "n", "When are the movers coming and what do we have to pack ourselves?"),
      ("sv", "k", "flyttfirman förrådet")]),
    ("home", "en", "Quotes for the bathroom renovation are in. Contractor A: 14,500, three weeks, includes "
     "waterproofing and underfloor heating but the tiles are extra. Contractor B: 12,900, five weeks, tiles included up "
     "to 40 per square metre, no floor heating. Contractor C: 17,200, two weeks, everything included and a five-year "
     "warranty on the waterproofing. B is cheapest on paper but the longer time means we'd need the gym showers for "
     "over a month; A with our own tiles ends up around 15,300.",
     [("en", "n", "Which builder offers the longest guarantee for the bathroom?"),
      ("it", "n", "Quale preventivo per il bagno include il riscaldamento a pavimento?"),
      ("en", "k", "contractor waterproofing warranty")]),
    ("home", "de", "Der Vermieter erhöht die Kaltmiete ab Oktober um 45 Euro nach Mietspiegel; Widerspruch ist bis Ende "
     "August möglich.",
     [("de", "n", "Bis wann kann ich gegen die Mieterhöhung vorgehen?"),
      ("en", "n", "How much is the rent going up and can I object?"),
      ("de", "k", "Kaltmiete Mietspiegel")]),
    ("home", "it", "Caldaia: revisione fatta, prossima tra due anni.",
     [("it", "n", "Quando va controllato di nuovo il riscaldamento?"),
      ("de", "n", "Wann muss der Heizkessel wieder gewartet werden?"),
      ("it", "k", "caldaia revisione")]),
    ("home", "es", "El fontanero viene el martes para la fuga debajo del fregadero; mientras tanto, cierra la llave de "
     "paso de la cocina.",
     [("es", "n", "¿Qué hago mientras no arreglan la pérdida de agua?"),
      ("sv", "n", "Vad ska jag göra med läckan under diskbänken tills rörmokaren kommer?"),
      ("es", "k", "fontanero fuga fregadero")]),
    ("home", "en", "Wi-Fi password for the guest network: Lighthouse-42.",
     [("en", "n", "What's the code for the visitors' internet?"),
      ("de", "n", "Wie lautet das WLAN-Passwort für Gäste?"),
      ("en", "k", "guest network password")]),
    ("home", "sv", "Elräkningen för januari blev 3 840 kronor, nästan dubbelt mot december. Jag jämförde: förbrukningen "
     "ökade bara 20 procent (kallare och vi hade gäster), men spotpriset i elområde 3 låg i snitt på 1,85 kr/kWh mot "
     "0,92 i december. Vi har rörligt avtal utan timmätning, så vi betalar månadens snittpris. Att byta till timpris "
     "och köra disk- och tvättmaskin på natten skulle spara uppskattningsvis 300 kronor i månaden vintertid; ett fast "
     "pris på 1,29 kr i ett år är ett alternativ om vi vill slippa överraskningar.",
     [("sv", "n", "Varför var elkostnaden så hög i januari?"),
      ("es", "n", "¿Por qué la factura de la luz de enero fue tan alta?"),
      ("sv", "k", "spotpriset timpris")]),
    ("home", "de", "Checkliste für die Wohnungsübergabe: alle Dübellöcher verspachteln, die Wände im Kinderzimmer wieder "
     "weiß streichen, Backofen und Kühlschrank gründlich reinigen, Kalk von den Armaturen entfernen, alle Schlüssel "
     "inklusive Briefkasten und Keller zurückgeben. Zählerstände für Strom, Gas und Wasser fotografieren und ins "
     "Übergabeprotokoll eintragen lassen. Die Kaution von drei Monatsmieten darf der Vermieter bis zu sechs Monate "
     "einbehalten, wenn die Nebenkostenabrechnung noch aussteht.",
     [("de", "n", "Was muss vor der Rückgabe der alten Wohnung erledigt sein?"),
      ("en", "n", "When do I get my deposit back after moving out?"),
      ("de", "k", "Übergabeprotokoll Zählerstände")]),
    ("home", "it", "Il condominio ha approvato il cappotto termico: la nostra quota è 9.800 euro, con il bonus ne "
     "recuperiamo metà in dieci anni.",
     [("it", "n", "Quanto ci costa l'isolamento del palazzo?"),
      ("en", "n", "How much is our share of the building insulation work?"),
      ("it", "k", "cappotto termico quota")]),
    ("home", "es", "Mudanza confirmada para el 3 de julio.",
     [("es", "n", "¿Qué día nos cambiamos de piso?"),
      ("it", "n", "In che giorno è il trasloco?"),
      ("es", "k", "mudanza julio")]),
    # --- work ----------------------------------------------------------------------------------------------
    ("work", "en", "Standup moved to 9:45 from Monday because the Berlin team starts later; the calendar invite is "
     "updated.",
     [("en", "n", "What time is the daily meeting now?"),
      ("sv", "n", "När har vi det dagliga mötet numera?"),
      ("en", "k", "standup calendar invite")]),
    ("work", "de", "Protokoll der Quartalsplanung: Das Team übernimmt ab Juli die Migration des Zahlungsdienstes auf die "
     "neue Plattform, Ziel ist der Abschluss bis Ende September. Sandra leitet das Projekt, Jonas kümmert sich um die "
     "Datenmigration, und zwei externe Entwickler werden für drei Monate dazugeholt. Das Budget von 180.000 Euro ist "
     "freigegeben. Risiken: die Abhängigkeit vom Buchhaltungssystem, das erst im August aktualisiert wird, und die "
     "Urlaubszeit. Nächstes Review am 15. Juli.",
     [("de", "n", "Wer ist für den Umzug der Zahlungen verantwortlich?"),
      ("en", "n", "Who is in charge of moving the payment service and what's the budget?"),
      ("de", "k", "Zahlungsdienstes Budget freigegeben")]),
    ("work", "sv", "Lönesamtalet gick bra: 4,5 procent höjning från april och en extra semestervecka.",
     [("sv", "n", "Hur mycket fick jag i löneökning?"),
      ("it", "n", "Quanto è stato l'aumento di stipendio?"),
      ("sv", "k", "lönesamtalet höjning")]),
    ("work", "it", "Feedback del cliente sulla demo di ieri: apprezzano la nuova dashboard e la velocità delle ricerche, "
     "ma chiedono tre cose prima di firmare. Primo, l'esportazione dei report in Excel con i filtri applicati; secondo, "
     "l'accesso con il loro Single Sign-On su Azure; terzo, la possibilità di nascondere i dati sensibili ai ruoli di "
     "sola lettura. Il responsabile acquisti ha detto che se consegniamo entro fine ottobre il contratto triennale è "
     "nostro. Ho stimato sei settimane di lavoro.",
     [("it", "n", "Cosa vuole il cliente prima di accettare l'accordo?"),
      ("es", "n", "¿Qué pidió el cliente después de la demostración?"),
      ("it", "k", "Single Sign-On Azure")]),
    ("work", "es", "La entrevista con la candidata para el puesto de diseñadora es el jueves a las 11; Marta y yo la "
     "hacemos por videollamada.",
     [("es", "n", "¿Cuándo hablamos con la persona que quiere el trabajo de diseño?"),
      ("en", "n", "When is the interview for the designer role?"),
      ("es", "k", "entrevista candidata diseñadora")]),
    ("work", "en", "Out of office 12-19 August, Priya covers on-call.",
     [("en", "n", "Who handles incidents while I'm away in August?"),
      ("it", "n", "Chi è reperibile mentre sono in ferie ad agosto?"),
      ("en", "k", "out of office on-call")]),
    ("work", "de", "Die Präsentation für den Vorstand braucht noch Zahlen zur Kundenabwanderung; Churn lag im zweiten "
     "Quartal bei 3,1 Prozent.",
     [("de", "n", "Wie viele Kunden haben wir zuletzt verloren?"),
      ("sv", "n", "Hur stort var kundbortfallet i andra kvartalet?"),
      ("de", "k", "Churn Quartal")]),
    ("work", "sv", "Sammanfattning av retrospektivet: det som fungerade var att vi delade upp stora ärenden i mindre och "
     "att kodgranskningar nu sker inom en dag. Det som inte fungerade var releasen i fredags som fick rullas tillbaka, "
     "för att migreringen av databasen inte testats mot produktionsdata, och att supporten inte informerades i tid. "
     "Åtgärder: en staging-miljö med anonymiserad kopia av produktionsdatan, inga releaser efter torsdag lunch, och "
     "ett releasemeddelande till supporten dagen innan.",
     [("sv", "n", "Vad bestämde vi efter den misslyckade utrullningen?"),
      ("en", "n", "What did the team agree to change after the rollback?"),
      ("sv", "k", "retrospektivet anonymiserad")]),
    ("work", "es", "Recordatorio: la factura 2024-117 al cliente de Valencia sigue pendiente; vence el viernes y son "
     "3.450 euros más IVA.",
     [("es", "n", "¿Qué cobro está todavía sin pagar?"),
      ("de", "n", "Welche Rechnung ist noch offen?"),
      ("es", "k", "factura pendiente IVA")]),
    ("work", "it", "Call con Marco spostata a domani alle 15.",
     [("it", "n", "Quando ci sentiamo con Marco?"),
      ("en", "n", "When is the call with Marco now?"),
      ("it", "k", "call Marco")]),
    # --- car -----------------------------------------------------------------------------------------------
    ("car", "sv", "Bilen gick igenom besiktningen, men bromsskivorna fram har anmärkning och ska bytas inom två "
     "månader.",
     [("sv", "n", "Vad sa de om bilen vid kontrollen?"),
      ("en", "n", "Did the car pass its inspection?"),
      ("sv", "k", "besiktningen bromsskivorna")]),
    ("car", "en", "Comparison for the new family car: the hybrid estate costs 34,000 and uses about 4.8 litres per 100 "
     "km, insurance around 620 a year; the fully electric one is 39,500 but with the home charger and our mileage of "
     "18,000 km a year, the energy cost drops from roughly 1,300 to 550 a year, and servicing is cheaper. The electric "
     "car breaks even in about five years, sooner if the 3,000 grant is still available when we order. Range is 420 "
     "km, enough except for the summer trip north, where we'd need two fast-charging stops.",
     [("en", "n", "After how many years does the battery car pay off?"),
      ("de", "n", "Lohnt sich das Elektroauto im Vergleich zum Hybrid?"),
      ("en", "k", "electric hybrid charger")]),
    ("car", "de", "Winterreifen drauf, Sommerreifen im Keller.",
     [("de", "n", "Sind die Reifen für die kalte Jahreszeit schon montiert?"),
      ("es", "n", "¿Ya están puestos los neumáticos de invierno?"),
      ("de", "k", "Winterreifen")]),
    ("car", "it", "La spia del motore si è accesa: il meccanico dice che è la sonda lambda, 180 euro con il montaggio.",
     [("it", "n", "Cosa c'era che non andava con la luce accesa sul cruscotto?"),
      ("en", "n", "Why was the engine warning light on?"),
      ("it", "k", "sonda lambda meccanico")]),
    ("car", "es", "Multa de 200 euros por exceso de velocidad en la A-6; con el pronto pago se queda en 100 si pagas "
     "antes de 20 días.",
     [("es", "n", "¿Puedo pagar menos por la sanción de tráfico?"),
      ("de", "n", "Kann ich das Bußgeld für zu schnelles Fahren reduzieren?"),
      ("es", "k", "multa velocidad pronto pago")]),
    ("car", "sv", "Däcktrycket ska vara 2,5 bar fram.",
     [("sv", "n", "Hur mycket luft ska det vara i framhjulen?"),
      ("it", "n", "Qual è la pressione giusta delle gomme anteriori?"),
      ("sv", "k", "däcktrycket")]),
    ("car", "en", "The car insurance renewal jumped to 890; a quote from another insurer gives the same cover for 640 "
     "with a 300 excess.",
     [("en", "n", "Is there a cheaper option for insuring the car?"),
      ("sv", "n", "Finns det en billigare bilförsäkring?"),
      ("en", "k", "insurance renewal excess")]),
    ("car", "it", "Ho portato la macchina al tagliando dei 60.000 km: cambiati olio e filtri, candele e liquido dei "
     "freni. Il meccanico ha notato che la cinghia di distribuzione va sostituita entro i 90.000 km o al massimo tra due "
     "anni, e che gli ammortizzatori posteriori sono un po' scarichi, ma non è urgente. Totale 420 euro. Mi ha "
     "consigliato di fare la cinghia insieme alla pompa dell'acqua per risparmiare sulla manodopera, circa 650 euro in "
     "tutto.",
     [("it", "n", "Quando bisogna cambiare la cinghia?"),
      ("en", "n", "When does the timing belt need replacing?"),
      ("it", "k", "tagliando cinghia distribuzione")]),
    ("car", "de", "Der TÜV-Termin ist am 3. März um 10 Uhr bei der Prüfstelle in Pasing; Fahrzeugschein nicht "
     "vergessen.",
     [("de", "n", "Wann muss das Auto zur Hauptuntersuchung?"),
      ("en", "n", "When is the car's safety inspection appointment?"),
      ("de", "k", "TÜV Fahrzeugschein")]),
    ("car", "es", "Batería cambiada, el coche arranca bien.",
     [("es", "n", "¿Se solucionó el problema de arranque?"),
      ("sv", "n", "Startar bilen nu?"),
      ("es", "k", "batería arranca")]),
]

SHORT_CHARS = 120  # a target this long or shorter is short
LONG_CHARS = 400  # this long or longer is long


def load() -> tuple[list[Message], list[Question]]:
    """The messages (ids `<session>-<n>`, in session order) and the questions."""
    messages: list[Message] = []
    questions: list[Question] = []
    count: dict[str, int] = {}
    for session, lang, text, asked in _SET:
        count[session] = count.get(session, 0) + 1
        msg = Message(f"{session}-{count[session]}", session, lang, text)
        messages.append(msg)
        for qlang, kind, q in asked:
            questions.append(Question(q, qlang, "natural" if kind == "n" else "keyword", msg.id, lang, len(text)))
    return messages, questions
